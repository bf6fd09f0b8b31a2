import type { ActionContext, ReplyData } from "../../agent/agent.js";
import { RpcError } from "../../errors.js";
import { Status } from "../../protocol/status.js";
import { exportedFacts, type PuppetRunResult } from "../../puppet/index.js";
import { asRpcError, puppetTarget, type ProvisionRuntime } from "./state.js";

// bootstrap_puppet and run_puppet: one foreground run in an environment with the stage fact set.
// Exit 0/2 reply OK; 4/6 and 1 are Aborted with the run's details in the reply data.
//
// The FACTER_<stage_fact> variable lasts one run. Once the bootstrap stage has succeeded (and before
// any production run, in case the bootstrap step is switched off) the stage fact is persisted as
// `production` in stage_fact_file, a file Facter reads on every run: the daemon, cron and
// `muster puppet runonce` runs see `production` ever after, as the CoreOS two-stage bootstrap
// arranges. FACTER_ wins over the file, so bootstrapping the node again still says `bootstrap`.

export async function puppetRun(rt: ProvisionRuntime, ctx: ActionContext, which: "bootstrap" | "production", noop: boolean): Promise<ReplyData> {
  const s = rt.settings(ctx);
  rt.ensureEnabled(s);
  const environment = which === "bootstrap" ? s.bootstrapEnvironment : s.productionEnvironment;
  if (which === "production" && !noop) await persistStage(rt, s.stageFactFile, s.stageFact, ctx);
  let r: PuppetRunResult;
  try {
    r = await rt.ops.puppetRun(puppetTarget(s), {
      environment,
      facts: { ...exportedFacts(s.exportFacts, ctx.metadata().facts), [s.stageFact]: which },
      noop,
      signal: ctx.signal,
      timeoutMs: s.runTimeoutSeconds * 1000,
    });
  } catch (e) {
    throw asRpcError(e);
  } finally {
    // the run rewrote Puppet's classes file: the node's classes change now, not at the next poll
    await ctx.refreshMetadata?.().catch((e: unknown) => ctx.log.warn({ err: (e as Error).message }, "cannot refresh metadata after the run"));
  }
  // written before a production run, after a bootstrap run only if it succeeded
  const persisted = !noop && (which === "production" || r.success);
  const data = {
    exitcode: r.exitcode,
    changed: r.changed,
    environment,
    stage: which,
    resources: r.resources,
    failed_resources: r.failedResources,
    errors: r.errors,
    retryable: r.retryable,
    duration: Math.round(r.durationMs) / 1000,
    output: r.output,
    stage_fact_file: persisted ? s.stageFactFile : null,
  };
  ctx.log.info({ environment, exitcode: r.exitcode, changed: r.changed, failed: r.failedResources.length }, `puppet ${which} run finished`);
  if (r.success) {
    if (which === "bootstrap" && !noop) {
      try {
        await persistStage(rt, s.stageFactFile, s.stageFact, ctx);
      } catch (e) {
        throw new RpcError(Status.Aborted, `the bootstrap run succeeded but later runs would not know they are production: ${(e as Error).message} (fix plugins.provision.stage_fact_file)`, { ...data, stage_fact_file: null });
      }
    }
    return data;
  }
  if (r.retryable) throw new RpcError(Status.Aborted, `a Puppet run is already in progress on ${s.certname}; retry later`, data);
  if (r.disabled) throw new RpcError(Status.Aborted, `the Puppet agent on ${s.certname} is administratively disabled (puppet agent --enable to allow runs)`, data);
  const what =
    r.failedResources.length > 0
      ? `${r.failedResources.length} resource(s) failed: ${r.failedResources.map((f) => f.resource).join(", ")}`
      : r.errors.length > 0
        ? // the first error is the cause (e.g. the master's compile error); later ones are consequences
          `${r.errors[0] ?? ""}${r.errors.length > 1 ? ` (+${r.errors.length - 1} more)` : ""}`
        : `see output`;
  throw new RpcError(Status.Aborted, `puppet ${which} run in ${environment} failed (exit ${r.exitcode}): ${what}`.slice(0, 2000), data);
}

/** Persist `<stage_fact>=production` for every later run (see the top of this file). */
async function persistStage(rt: ProvisionRuntime, file: string, fact: string, ctx: ActionContext): Promise<void> {
  try {
    if (await rt.ops.persistStage(file, fact)) ctx.log.info({ file, fact }, "later Puppet runs see the production stage");
  } catch (e) {
    throw asRpcError(e);
  }
}
