import type { MusterClient } from "../client/client.js";
import { MusterError } from "../errors.js";
import { buildFilter } from "../filter/index.js";
import { Status } from "../protocol/status.js";
import { dropRegistryEntry } from "../registry/bucket.js";
import { ProvisionState } from "../provisioner/state.js";
import { AliveStore, PuppetRunStore } from "../health/stores.js";

// Taking a node out of the fleet for good, as an ordinary client of the public API: the masters'
// puppetca agents revoke and clean its certificate and deactivate it in their PuppetDB (as `puppet
// node deactivate` does, with the master's certificate), its provisioning and registry records (and its
// heartbeat and Puppet runs) are dropped from their KV buckets, and the notify agent tells the admins. The node itself is never
// asked: it may be gone already (an auto-scaler terminated it), and a node cannot vouch for its
// own removal anyway. Every step is idempotent, so running it twice, or after a partial failure,
// finishes the job; a step with nothing left to do says so and succeeds.
//
// Order: the provisioning record goes first, so a provisioner still working on the node loses its
// next compare-and-set and leaves it before the certificates are cleaned under it.

export const DecommissionSteps = ["provisioning", "certificate", "puppetdb", "registry", "notify"] as const;
export type DecommissionStep = (typeof DecommissionSteps)[number];

export interface StepResult {
  identity: string;
  step: DecommissionStep;
  ok: boolean;
  /** Whether the step removed something (false: nothing was left to remove). */
  changed: boolean;
  detail: string;
  ms: number;
}

export interface NodeOutcome {
  identity: string;
  ok: boolean;
  /** The node still answered discovery in the fleet when we started (it will come back in the registry). */
  stillRunning: boolean;
  steps: StepResult[];
}

export interface DecommissionOptions {
  /** Masters: nodes with this agent (default puppetca), narrowed by `masterSelect` (a compound filter). */
  masterAgent?: string;
  masterSelect?: string;
  notify?: boolean;
  notifyAgent?: string;
  notifySelect?: string;
  /** Recipients passed to the notifier; default: its own configured ones. */
  recipients?: string[];
  stateBucket: string;
  registryBucket: string;
  /** Check each step took effect (the CA no longer knows the name, the records read back absent). */
  verify?: boolean;
  discoveryTimeoutMs?: number;
  /** Per request to the masters and the notifier. */
  timeoutMs?: number;
  /** Nodes decommissioned at the same time (default 8). */
  concurrency?: number;
  /** Who asks (recorded in the notification). */
  operator?: string;
  onStep?: (r: StepResult) => void;
}

const CERTNAME = /^[A-Za-z0-9._-]+$/;

/** Identities decommission accepts: Puppet certnames (what the CA can be asked about). */
export function checkDecommissionIds(ids: string[]): void {
  if (ids.length === 0) throw new MusterError("MUSTER_USAGE", "name at least one node: muster decommission IDENTITY...");
  const bad = ids.filter((id) => !CERTNAME.test(id) || id.startsWith(".") || id.length > 255);
  if (bad.length) throw new MusterError("MUSTER_USAGE", `not a node identity (a Puppet certname: letters, digits, . _ -): ${bad.map((b) => JSON.stringify(b)).join(", ")}`);
}

/**
 * Decommission every node in `ids`. Throws (before changing anything) when no master answers:
 * without one, certificates cannot be revoked, and a half-done decommission would look done.
 */
export async function decommission(client: MusterClient, names: string[], o: DecommissionOptions): Promise<NodeOutcome[]> {
  checkDecommissionIds(names);
  const ids = [...new Set(names)];
  const dt = o.discoveryTimeoutMs ?? 2000;
  const timeoutMs = o.timeoutMs ?? 60_000;
  const masterAgent = o.masterAgent ?? "puppetca";
  const masterFilter = buildFilter({ agent: [masterAgent], select: o.masterSelect ? [o.masterSelect] : [] });
  const notifyFilter = buildFilter({ agent: [o.notifyAgent ?? "notify"], select: o.notifySelect ? [o.notifySelect] : [] });
  const [masters, running, notifiers] = await Promise.all([
    client.discover({ filter: masterFilter, timeoutMs: dt }),
    client.discover({ filter: buildFilter({ identity: ids }), timeoutMs: dt }),
    o.notify === false ? Promise.resolve([]) : client.discover({ filter: notifyFilter, timeoutMs: dt }),
  ]);
  const notifier = notifiers[0];
  if (masters.length === 0) {
    throw new MusterError("MUSTER_NO_MASTER", `no Puppet master (agent ${masterAgent}${o.masterSelect ? `, ${o.masterSelect}` : ""}) answered discovery in collective ${client.collective}; nothing was changed. Check the masters' muster servers, or --masters`);
  }
  const state = await ProvisionState.openExisting(client, o.stateBucket);
  // A scale-in event retires many nodes at once: a few at a time, each node's steps in order.
  const out: NodeOutcome[] = new Array(ids.length);
  let next = 0;
  const worker = async () => {
    while (next < ids.length) {
      const i = next++;
      out[i] = await one(ids[i]!);
    }
  };
  const one = async (identity: string): Promise<NodeOutcome> => {
    const steps: StepResult[] = [];
    const run = async (step: DecommissionStep, fn: () => Promise<{ changed: boolean; detail: string }>) => {
      const t0 = performance.now();
      let r: StepResult;
      try {
        const d = await fn();
        r = { identity, step, ok: true, ...d, ms: Math.round(performance.now() - t0) };
      } catch (e) {
        r = { identity, step, ok: false, changed: false, detail: (e as Error).message, ms: Math.round(performance.now() - t0) };
      }
      steps.push(r);
      o.onStep?.(r);
    };

    await run("provisioning", async () => {
      if (!state) return { changed: false, detail: `no provisioning bucket ${o.stateBucket}: nothing to drop` };
      const was = await state.remove(identity);
      if (o.verify && (await state.get(identity))) throw new Error("the record is still there after dropping it");
      // a Puppet master decommissioned: its region's new nodes no longer wait for it
      const master = (await state.masters.forget(identity)) ? "; forgotten as a known master" : "";
      if (!was) return { changed: master !== "", detail: `no record: already gone${master}` };
      return { changed: true, detail: `dropped (was ${was.status}${was.master ? `, master ${was.master}` : ""})${master}` };
    });

    await run("certificate", async () => {
      // One signed request to every master: a node may have been signed by any of them.
      const res = await client.call(masterAgent, "clean", { certname: identity }, { nodes: masters, timeoutMs });
      const parts: string[] = [];
      const failed: string[] = [];
      let changed = false;
      for (const m of masters) {
        const r = res.replies.find((x) => x.sender === m);
        if (!r) failed.push(`${m}: no reply within ${Math.round(timeoutMs / 1000)}s`);
        else if (r.statuscode !== Status.OK) failed.push(`${m}: ${r.statusmsg}`);
        else if (r.data.cleaned !== true) parts.push(`none on ${m}`);
        else {
          changed = true;
          parts.push(r.data.revoked === true ? `revoked and cleaned on ${m}` : `cleaned ${String(r.data.previous_state)} on ${m}`);
        }
      }
      if (failed.length) throw new Error(`not cleaned everywhere: ${failed.join("; ")}${parts.length ? ` (${parts.join(", ")})` : ""}`);
      if (o.verify) {
        const st = await client.call(masterAgent, "status", { certname: identity }, { nodes: masters, timeoutMs });
        const left = masters.filter((m) => st.replies.find((x) => x.sender === m)?.data.state !== "unknown");
        if (left.length) throw new Error(`still known to ${left.join(", ")} after cleaning`);
        parts.push(`verified: unknown to ${masters.length} master(s)`);
      }
      return { changed, detail: changed ? parts.join(", ") : `no certificate on ${masters.length} master(s): already gone${o.verify ? " (verified)" : ""}` };
    });

    await run("puppetdb", async () => {
      // every master deactivates it in the PuppetDB of its puppetdb.conf (masters may share one,
      // or each have their own); a master with none says so, and nothing is left to do there
      const res = await client.call(masterAgent, "deactivate", { certname: identity }, { nodes: masters, timeoutMs });
      const failed: string[] = [];
      const by = new Map<string, { done: string[]; was: string[] }>();
      for (const m of masters) {
        const r = res.replies.find((x) => x.sender === m);
        if (!r) failed.push(`${m}: no reply within ${Math.round(timeoutMs / 1000)}s`);
        else if (r.statuscode === Status.UnknownAction) failed.push(`${m}: its muster server has no puppetca#deactivate (an older muster): upgrade it, or run \`puppet node deactivate ${identity}\` there`);
        else if (r.statuscode !== Status.OK) failed.push(`${m}: ${r.statusmsg}`);
        else if (typeof r.data.puppetdb === "string") {
          const e = by.get(r.data.puppetdb) ?? by.set(r.data.puppetdb, { done: [], was: [] }).get(r.data.puppetdb)!;
          if (r.data.deactivated === true) e.done.push(m);
          else e.was.push(String(r.data.previous_state));
        }
      }
      const parts = [...by].map(([url, e]) => (e.done.length ? `deactivated in PuppetDB ${url} (by ${e.done.join(", ")})` : e.was.includes("unknown") ? `unknown to PuppetDB ${url}` : `already inactive in PuppetDB ${url}`));
      if (failed.length) throw new Error(`not deactivated everywhere: ${failed.join("; ")}${parts.length ? ` (${parts.join(", ")})` : ""}`);
      if (!by.size) return { changed: false, detail: `no master sends to a PuppetDB (no puppetdb.conf on ${masters.length} master(s)): nothing to deactivate` };
      // the masters read the node back from PuppetDB before answering: verified either way
      return { changed: [...by.values()].some((e) => e.done.length > 0), detail: parts.join(", ") };
    });

    await run("registry", async () => {
      const r = await dropRegistryEntry(await client.bucketIfExists(o.registryBucket), identity);
      if (o.verify && r === "dropped" && (await dropRegistryEntry(await client.bucketIfExists(o.registryBucket), identity)) !== "absent") throw new Error("the record is still there after dropping it");
      // its heartbeat and Puppet runs too: fleet health stops reporting a node taken out for good
      const [alive, runs] = await Promise.all([AliveStore.open(client), PuppetRunStore.open(client)]);
      await Promise.all([alive?.forget(identity), runs?.forget(identity)]);
      const health = alive || runs ? "; its heartbeat and Puppet runs dropped" : "";
      if (r === "no-bucket") return { changed: false, detail: `no registry bucket ${o.registryBucket}: nothing to drop${health}` };
      return r === "dropped" ? { changed: true, detail: `dropped from ${o.registryBucket}${health}${running.includes(identity) ? " (the node still runs and will register again: shut it down)" : ""}` } : { changed: false, detail: `no record: already gone${health}` };
    });

    if (o.notify !== false) {
      await run("notify", async () => {
        if (!notifier) throw new Error(`no notifier (agent ${o.notifyAgent ?? "notify"}) answered discovery; the admins were not told`);
        const lines = steps.map((s) => `  ${s.step}: ${s.ok ? "" : "FAILED: "}${s.detail}`);
        const failedAny = steps.some((s) => !s.ok);
        const subject = failedAny ? `Decommission of ${identity} INCOMPLETE` : steps.some((s) => s.changed) ? `Decommissioned ${identity}` : `Decommission of ${identity}: nothing was left to clean`;
        const message = `${o.operator ?? "An operator"} decommissioned ${identity}${running.includes(identity) ? " (it still answered in the fleet)" : ""}.\n${lines.join("\n")}\n`;
        const res = await client.call(o.notifyAgent ?? "notify", "send", { subject, message, ...(o.recipients?.length ? { recipients: o.recipients } : {}) }, { nodes: [notifier], timeoutMs });
        const r = res.replies[0];
        if (!r) throw new Error(`${notifier} did not answer within ${Math.round(timeoutMs / 1000)}s`);
        if (r.statuscode !== Status.OK) throw new Error(`${notifier}: ${r.statusmsg}`);
        return { changed: true, detail: `admins told by ${notifier} (${String(r.data.delivered ?? 0)} recipient(s))` };
      });
    }
    return { identity, ok: steps.every((s) => s.ok), stillRunning: running.includes(identity), steps };
  };
  await Promise.all(Array.from({ length: Math.min(o.concurrency ?? 8, ids.length) }, worker));
  return out;
}
