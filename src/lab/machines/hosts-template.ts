import { join } from "node:path";

// The site's names in a machine's /etc/hosts: the lab network has no DNS server, so cloud-init's
// hosts template carries them, baked into the image of the site's release (image.ts) or written
// into one machine's own disk (boot.ts).

/** cloud-init's /etc/hosts template (manage_etc_hosts), relative to a root. */
export const HOSTS_TEMPLATE = join("etc", "cloud", "templates", "hosts.debian.tmpl");

/** The hosts template with the site's names added (the lab network has no DNS server). Pure. */
export function hostsTemplateWith(template: string, lines: string): string {
  return `${template.trimEnd()}\n\n# muster lab: the site's machines (the lab network has no DNS server)\n${lines}\n`;
}
