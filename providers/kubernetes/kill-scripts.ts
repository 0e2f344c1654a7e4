/**
 * Killing from inside a Pod, the `tagged` guarantee: a timeout's kill script for one exec id
 * (`../shared/kill-script.ts`), stop-processes' script for every process but the keeper, and
 * when either does not take effect (the agent, as the Pod's user, can stop or outrun them), the
 * Pod itself, deleted, which nothing in it can resist.
 */
import type { KubeConfig } from '@kubernetes/client-node';
import { GymError } from '../../core/errors.ts';
import type { Logger } from '../../core/logger.ts';
import type { StopProcessesResult } from '../../core/schemas/api.ts';
import { type KillOutcome, type KillReach, killScriptArgv } from '../shared/kill-script.ts';
import { withTimeout } from '../shared/with-timeout.ts';
import { type PodTarget, runPodCommand } from './pod-exec.ts';
import type { Pods } from './pods.ts';

/**
 * Stops every process of the Pod but PID 1 (the idle keeper) and itself: each pass first stops
 * all (SIGSTOP, so none can fork or reap meanwhile), then kills them, until a pass finds none
 * that can still run. Two kinds are not killed again and again:
 * - the keeper's idle sleep (a child of PID 1 in PID 1's session: every exec starts a session of
 *   its own, and no process joins another's) is left stopped, not killed: killed, the keeper
 *   would start another, which the next pass may find (under load, pass after pass). It is
 *   settled once seen stopped (state T) in a later pass with the same pid and start time: a
 *   process that stayed stopped forked nothing meanwhile.
 * - a process killed in an earlier pass (same pid and start time) cannot run user code again,
 *   though it may take a while to go (e.g. blocked in I/O).
 * Zombies, already dead, are left to their parent or PID 1.
 * A pass that finds nothing to kill but the keeper's sleep not yet seen stopped waits 10 ms and
 * does not count against the 50 passes (at most 300 such waits): a pass over a quiet Pod takes
 * well under a millisecond, and on a loaded node the stopped sleep may not run to take its stop
 * for longer than 50 passes took. Only the keeper makes such a process, so an agent cannot make
 * the script wait with it; the script's own time bound covers the rest.
 * Shell builtins only; prints how many it killed. An agent that replaced `/bin/sh` defeats it,
 * as it does the kill script.
 */
const STOP_SCRIPT = `
self=$$; pass=0; waits=0; total=0; held=" "; dying=" "
init=""; read -r init < /proc/1/stat; set -- \${init##*) }; keeper="$3 $4"
while [ "$pass" -lt 50 ] && [ "$waits" -lt 300 ]; do
  found=""; unsettled=0
  for dir in /proc/[0-9]*; do
    pid="\${dir#/proc/}"
    [ "$pid" = 1 ] && continue
    [ "$pid" = "$self" ] && continue
    stat=""; read -r stat < "$dir/stat" 2>/dev/null || continue
    set -- \${stat##*) }
    [ "$1" = Z ] && continue
    kill -STOP "$pid" 2>/dev/null || continue
    id="$pid@\${20}"
    if [ "$2" = 1 ] && [ "$3 $4" = "$keeper" ]; then
      case "$held" in
        *" $id "*) [ "$1" = T ] || unsettled=$((unsettled + 1));;
        *) held="$held$id "; unsettled=$((unsettled + 1));;
      esac
      continue
    fi
    case "$dying" in *" $id "*) kill -9 "$pid" 2>/dev/null; continue;; esac
    found="$found $id"
  done
  if [ -z "$found" ] && [ "$unsettled" = 0 ]; then echo "$total"; exit 0; fi
  if [ -z "$found" ]; then waits=$((waits + 1)); sleep 0.01 2>/dev/null || sleep 1; continue; fi
  for id in $found; do
    kill -9 "\${id%@*}" 2>/dev/null && { dying="$dying$id "; total=$((total + 1)); }
  done
  pass=$((pass + 1))
done
echo "$total"; exit 1
`;

/**
 * How long a timeout's kill script may take before the kill counts as failed and the Pod is
 * killed instead. Normally it takes milliseconds; an exec can take seconds to start on a loaded
 * node, and a sandbox killed for that alone would be lost for nothing.
 */
const KILL_SCRIPT_WAIT_MS = 15_000;
/**
 * How long stop-processes' script may take before it counts as resisted and the Pod is deleted.
 * Longer than the timeout kill's: an exec can take seconds to start on a loaded node, and here a
 * Pod deleted for that alone costs an honest rollout its grade.
 */
const STOP_SCRIPT_WAIT_MS = 30_000;

/**
 * The grace of a Pod deleted because a timeout's kill script did not take effect: short, and not
 * 0, which would remove the Pod from the API at once while its containers may still run.
 */
const KILLED_POD_GRACE_SECONDS = 1;

/** How long the kubelet may take to kill such a Pod before the exec fails with an error. */
const KILLED_POD_WAIT_MS = 30_000;

export class PodProcesses {
  readonly #kubeConfig: KubeConfig;
  readonly #target: (id: string) => PodTarget;
  readonly #pods: Pods;
  readonly #logger: Logger;

  constructor(kubeConfig: KubeConfig, target: (id: string) => PodTarget, pods: Pods, logger: Logger) {
    this.#kubeConfig = kubeConfig;
    this.#target = target;
    this.#pods = pods;
    this.#logger = logger;
  }

  /**
   * Runs the kill script for one exec id in the Pod, bounded (opening its exec too); whether it
   * exited 0 in time.
   */
  async runKillScript(id: string, execId: string, reach: KillReach): Promise<boolean> {
    const ran = await withTimeout(
      runPodCommand(this.#kubeConfig, this.#target(id), killScriptArgv(execId, reach), {
        maxBytes: 1024,
        timeoutMs: KILL_SCRIPT_WAIT_MS,
      }).catch(() => null),
      KILL_SCRIPT_WAIT_MS + 5_000,
    );
    return ran !== null && ran.end.kind === 'exited' && ran.end.exitCode === 0;
  }

  /**
   * A timeout's kill: the kill script in the Pod, and when it did not take effect (see
   * `KillOutcome`: the agent, as the Pod's user, can stop or kill it, or fork faster than it
   * kills), the Pod itself, killed by the kubelet, which nothing in it can resist. Throws only
   * when even that fails (the API does not answer).
   */
  async killTagged(id: string, execId: string, reach: KillReach): Promise<KillOutcome> {
    if (await this.runKillScript(id, execId, reach)) return 'killed';
    this.#logger.warn(
      { sandboxId: id, execId },
      'the timeout kill script did not take effect in the Pod; deleting the Pod',
    );
    const isGone = await withTimeout(
      this.#pods.deleteAndWait(id, KILLED_POD_GRACE_SECONDS).then(
        () => true,
        () => false,
      ),
      KILLED_POD_WAIT_MS,
    );
    if (isGone) return 'sandbox_killed';
    // Never "timeout" with the command perhaps still running: the caller gets this error.
    throw new GymError(
      'PROVIDER_ERROR',
      `the timeout kill of a command in sandbox ${id} did not take effect, and its Pod could not be seen deleted in time: the sandbox is unusable`,
      { details: { sandboxId: id } },
    );
  }

  /**
   * Kills every process of the running Pod but its keeper, from inside (`STOP_SCRIPT`); when the
   * stop does not finish, deletes the Pod and says the sandbox is lost.
   */
  async stopAll(id: string): Promise<StopProcessesResult> {
    // The stop runs inside the Pod, where the agent's processes can stop or outrun it: bounded,
    // and when it does not finish the Pod goes, which nothing in it resists (as a timeout kill).
    // An exec the API refused (it never reached the Pod) is the cluster's fault, not the agent's
    // (under load an honest rollout was once graded the agent's failure here: a refused exec or a
    // start slower than the bound, not pinned down; both are handled). Whatever happened in
    // the Pod (the script stopped, outrun, or not started because the agent broke its shell)
    // counts as resisting.
    let result: Awaited<ReturnType<typeof runPodCommand>> | null;
    try {
      result = await withTimeout(
        runPodCommand(this.#kubeConfig, this.#target(id), ['sh', '-c', STOP_SCRIPT], {
          maxBytes: 1024,
          timeoutMs: STOP_SCRIPT_WAIT_MS,
        }),
        STOP_SCRIPT_WAIT_MS + 5_000,
      );
    } catch (error) {
      throw new GymError(
        'PROVIDER_ERROR',
        `could not run the stop in the Pod of sandbox ${id}: ${String(error)}`,
        {
          details: { sandboxId: id },
          cause: error,
        },
      );
    }
    if (result === null || result.end.kind !== 'exited' || result.end.exitCode !== 0) {
      this.#logger.warn(
        {
          sandboxId: id,
          end: result?.end ?? 'no end in time',
          stdout: result?.stdout.toString('utf8').slice(0, 200),
          stderr: result?.stderr.slice(0, 500),
        },
        'stopping the processes did not finish in the Pod; deleting the Pod',
      );
      const isGone = await withTimeout(
        this.#pods.deleteAndWait(id, KILLED_POD_GRACE_SECONDS).then(
          () => true,
          () => false,
        ),
        KILLED_POD_WAIT_MS,
      );
      if (isGone === true)
        return {
          killed: 0,
          sandboxLost: true,
          reason:
            "the sandbox's processes resisted being stopped (the stop inside the Pod was stopped or outrun), so the Pod was deleted",
        };
      throw new GymError(
        'PROVIDER_ERROR',
        `could not stop the processes of sandbox ${id}, nor delete its Pod`,
        {
          details: { sandboxId: id },
        },
      );
    }
    const killed = Number.parseInt(result.stdout.toString('utf8').trim(), 10);
    if (!Number.isInteger(killed)) {
      throw new GymError(
        'PROVIDER_ERROR',
        `could not stop the processes of sandbox ${id}: ${JSON.stringify(result.end)} ${result.stderr}`,
        {
          details: { sandboxId: id },
        },
      );
    }
    return { killed };
  }
}
