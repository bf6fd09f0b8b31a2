// The lab's NRPE commands: process nodes read them from their own nrpe.d, machines get them from
// the lab's Puppet site (manifests.ts lab::nrpe).

/** Real checks from Debian's monitoring-plugins-basic, as NRPE's nrpe.d would define them. */
export const LAB_NRPE_PLUGINS = "/usr/lib/nagios/plugins";
export function labNrpeConfig(): string {
  const p = LAB_NRPE_PLUGINS;
  return [
    "# muster lab: NRPE commands for the nrpe agent (monitoring-plugins-basic)",
    // nspawn machines see the host's load average (one kernel): a lab of a dozen machines on two
    // cores runs at a scaled load of 8 while it boots, so the lab warns only well past that
    `command[check_load]=${p}/check_load -r -w 24,20,16 -c 48,40,32`,
    `command[check_disk]=${p}/check_disk -w 10% -c 5% -p /`,
    `command[check_procs]=${p}/check_procs -w 1500 -c 3000`,
    `command[check_users]=${p}/check_users -w 20 -c 50`,
    "",
  ].join("\n");
}
