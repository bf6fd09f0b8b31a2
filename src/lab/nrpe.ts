// The lab's NRPE commands: process nodes read them from their own nrpe.d, machines get them from
// the lab's Puppet site (manifests.ts lab::nrpe).

/** Real checks from Debian's monitoring-plugins-basic, as NRPE's nrpe.d would define them. */
export const LAB_NRPE_PLUGINS = "/usr/lib/nagios/plugins";
export function labNrpeConfig(): string {
  const p = LAB_NRPE_PLUGINS;
  return [
    "# muster lab: NRPE commands for the nrpe agent (monitoring-plugins-basic)",
    `command[check_load]=${p}/check_load -r -w 8,6,4 -c 16,12,8`,
    `command[check_disk]=${p}/check_disk -w 10% -c 5% -p /`,
    `command[check_procs]=${p}/check_procs -w 1500 -c 3000`,
    `command[check_users]=${p}/check_users -w 20 -c 50`,
    "",
  ].join("\n");
}
