import type { ActionHandler } from "../../../agent/agent.js";
import type { ActionInput } from "../../../ddl/types.js";
import { RpcError } from "../../../errors.js";
import { Status } from "../../../protocol/status.js";
import type { ProvisionDDL } from "../ddl.js";
import { readLock, writeLock, type ProvisionRuntime } from "../state.js";

/** Take the deploy lock: free, expired or already ours; otherwise Aborted naming the holder. */
export function lockDeploy(rt: ProvisionRuntime): ActionHandler<ActionInput<ProvisionDDL, "lock_deploy">> {
  return (input, ctx) =>
    rt.lockMutex.run(() => {
      const s = rt.settings(ctx);
      rt.ensureEnabled(s);
      const lease = input.lease ?? s.lockLeaseSeconds;
      if (lease <= 0 || lease > 7 * 24 * 3600) throw new RpcError(Status.InvalidData, `lease must be 1..604800 seconds, got ${lease}`);
      const now = rt.now();
      const held = readLock(s.lockFile);
      let taken: "new" | "renewed" | "expired";
      if (!held) taken = "new";
      else if (held.owner === input.owner) taken = "renewed";
      else if (held.expires <= now) taken = "expired";
      else {
        throw new RpcError(Status.Aborted, `deploy lock on ${ctx.identity} is held by ${held.owner} until ${new Date(held.expires).toISOString()}`, {
          locked: true,
          owner: held.owner,
          expires: held.expires,
        });
      }
      const expires = now + lease * 1000;
      writeLock(s.lockFile, { owner: input.owner, expires, acquired: taken === "renewed" && held ? held.acquired : now, identity: ctx.identity });
      ctx.log.info({ owner: input.owner, taken, previous: held?.owner }, "deploy lock taken");
      return { locked: true, owner: input.owner, expires, taken };
    });
}
