// The lab's two regions, each with its Puppet master's loopback address. Apart from lab.ts so that
// `muster lab add --help` can name them without loading the lab.

export interface LabRegion {
  name: string;
  country: string;
  region: string;
  host: string;
}

export const LAB_REGIONS: LabRegion[] = [
  { name: "eu", country: "de", region: "eu-central-1", host: "127.0.0.11" },
  { name: "us", country: "us", region: "us-east-1", host: "127.0.0.12" },
];
