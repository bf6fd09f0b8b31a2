import type { LabRegion } from "./regions.js";

// The lab's fixed names: its collectives, the provisioner's caller name, and the identities of its
// nodes and services. Operators' scripts and the tests use them, so they never change by accident.

export const LAB_COLLECTIVE = "muster";
/** Where nodes wait to be provisioned (provisioning isolation). */
export const LAB_PROVISIONING_COLLECTIVE = "provisioning";
/** The provisioner's caller name: the only one a waiting node answers. */
export const LAB_PROVISIONER_CALLER = "provisioner";
/** The lab's notifier node (notify agent, dedupe keys in KV). */
export const LAB_NOTIFIER = "notifier.lab";

/** Node `index` (0-based) in region `r`: node01.eu.lab, node02.us.lab, ... */
export function nodeIdentity(i: number, r: LabRegion): string {
  return `node${String(i + 1).padStart(2, "0")}.${r.name}.lab`;
}

/** The master of region `r` (its Puppet certname and its muster server's identity). */
export const masterIdentity = (r: LabRegion) => `puppet-${r.name}.lab`;
