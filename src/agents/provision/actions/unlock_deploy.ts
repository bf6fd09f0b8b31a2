import type { ActionHandler } from "../../../agent/agent.js";
import type { ActionInput } from "../../../ddl/types.js";
import { RpcError } from "../../../errors.js";
import { Status } from "../../../protocol/status.js";
import type { ProvisionDDL } from "../ddl.js";
import { readLock, removeFile, type ProvisionRuntime } from "../state.js";

/** Release the deploy lock. Another owner's live lock needs force; an expired one does not. */
export function unlockDeploy(rt: ProvisionRuntime): ActionHandler<ActionInput<ProvisionDDL, "unlock_deploy">> {
  return (input, ctx) =>
    rt.lockMutex.run(() => {
      const s = rt.settings(ctx);
      const held = readLock(s.lockFile);
      if (!held) return { unlocked: false, previous_owner: null };
      const live = held.expires > rt.now();
      if (live && !input.force && held.owner !== input.owner) {
        const who = input.owner === undefined ? "no owner was given" : `${input.owner} is not the owner`;
        throw new RpcError(Status.Aborted, `deploy lock on ${ctx.identity} is held by ${held.owner} (${who}); pass force to release it anyway`, {
          locked: true,
          owner: held.owner,
          expires: held.expires,
        });
      }
      removeFile(s.lockFile);
      ctx.log.info({ owner: held.owner, forced: input.force && held.owner !== input.owner }, "deploy lock released");
      return { unlocked: true, previous_owner: held.owner };
    });
}
