// What the shared flags parse to (options.ts defines them): types only, so that session.ts, which
// options.ts loads when a command runs, can use them without importing options.ts back.

export interface CommonOpts {
  broker?: string;
  config?: string;
  target?: string;
  json?: boolean;
}

export interface FilterOpts extends CommonOpts {
  wf?: string[];
  wc?: string[];
  wi?: string[];
  wa?: string[];
  with?: string[];
  select?: string[];
  dt?: number;
  dm?: string;
  nodes?: string;
}

export interface RpcOpts extends FilterOpts {
  batch?: number;
  batchSleep?: number;
  limit?: string;
  limitMethod?: "first" | "random";
  limitSeed?: number;
  display?: "ok" | "failed" | "all";
  timeout?: number;
  progress?: boolean;
}
