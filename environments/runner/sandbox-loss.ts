/**
 * Sandboxes a rollout's own commands destroyed. A command whose sandbox did not survive it by its
 * own doing (`ExecResult.sandboxLost`: the sandbox ran out of memory, or had to be killed because
 * the command resisted its kill) is the agent's failure, whatever the harness or the verifier
 * makes of what follows (the next command finds no sandbox, which alone would read as an
 * infrastructure fault). The runner watches every exec of the rollout, the agent's and its
 * verifier's, through the client it gives them.
 */
import type { GymClient } from '../../client/client.ts';
import type { ExecResult } from '../../core/schemas/exec.ts';

/** The first loss a rollout's commands caused. */
export interface SandboxLossRecord {
  sandboxId: string;
  /** How the command that lost it ended: `oom`, `timeout`, `killed`. */
  status: ExecResult['status'];
  reason: string;
}

export interface SandboxLossWatch {
  /** The client to hand the harness and the verifier: the same, with its execs watched. */
  client: GymClient;
  /** The first loss seen while watching, or null. */
  loss(): SandboxLossRecord | null;
  /** From now on a loss counts (the task's own setup, before it, is the dataset's, not the agent's). */
  start(): void;
}

export function watchSandboxLoss(client: GymClient): SandboxLossWatch {
  let isWatching = false;
  let first: SandboxLossRecord | null = null;
  const note = (id: string, result: ExecResult) => {
    if (isWatching && first === null && result.sandboxLost === true)
      first = {
        sandboxId: id,
        status: result.status,
        reason: result.reason ?? 'the sandbox did not survive a command',
      };
  };
  const watched = new Proxy(client, {
    get(target, property) {
      if (property === 'exec')
        return async (id: string, request: Parameters<GymClient['exec']>[1]) => {
          const result = await target.exec(id, request);
          note(id, result);
          return result;
        };
      if (property === 'stopProcesses')
        return async (id: string) => {
          const result = await target.stopProcesses(id);
          if (isWatching && first === null && result.sandboxLost === true)
            first = {
              sandboxId: id,
              status: 'killed',
              reason: result.reason ?? 'the sandbox did not survive being stopped',
            };
          return result;
        };
      if (property === 'execStream')
        return async function* (id: string, request: Parameters<GymClient['execStream']>[1]) {
          for await (const event of target.execStream(id, request)) {
            if (event.type === 'result') note(id, event.result);
            yield event;
          }
        };
      // Read on the client itself: its getters and methods use its private fields.
      const value = Reflect.get(target, property);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
  return {
    client: watched,
    loss: () => first,
    start: () => {
      isWatching = true;
    },
  };
}
