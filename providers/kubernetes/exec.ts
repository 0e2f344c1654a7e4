/**
 * Commands in a Pod over pods/exec. Each is wrapped in `sh -c` to apply env, cwd and user
 * (`setpriv`) and to tag it with `GYM_EXEC_ID`; a timeout or an abort runs the kill script for
 * that tag (`kill-scripts.ts`). A command that ends without a normal exit is classified: the OOM
 * killer, the Pod gone, or something else.
 */
import type { KubeConfig } from '@kubernetes/client-node';
import { GymError } from '../../core/errors.ts';
import { createId } from '../../core/ids.ts';
import type { ExecRequest, ExecResult, ExecStatus } from '../../core/schemas/exec.ts';
import type { ExecOptions } from '../sandbox-provider.ts';
import {
  type AbnormalEnd,
  abnormalEndResult,
  type ExecHooks,
  type OomKillCounts,
} from '../shared/abnormal-end.ts';
import {
  ExecOutput,
  markSandboxLost,
  OOM_COUNTER_COMMAND,
  parseOomKillCount,
  SIGKILL_EXIT_CODE,
  stdinBytes,
} from '../shared/exec-output.ts';
import {
  EXEC_ID_ENV,
  KILL_FAILED_NOTE,
  KILL_FAILED_REASON,
  type KillOutcome,
} from '../shared/kill-script.ts';
import { shellQuote } from '../shared/shell.ts';
import type { ShellSession } from '../shared/shell-session.ts';
import type { PodProcesses } from './kill-scripts.ts';
import {
  type PodExecEnd,
  type PodExecRefused,
  type PodTarget,
  runPodCommand,
  startPodExec,
} from './pod-exec.ts';
import { openPodSession } from './pod-session.ts';
import { endedOutOfMemory, POD_OOM_LOSS, podState, sandboxContainer } from './pod-status.ts';
import type { Pods } from './pods.ts';

/** Waits between reads of a Pod whose container may have just ended, for the kubelet's report. */
const OOM_REPORT_WAITS_MS = [250, 500, 1_000, 2_000];

/** After a kill, how long to wait for the command's stream to end before dropping it. */
const KILL_GRACE_MS = 5_000;

/**
 * Runs `"$@"` as a command would run under `docker exec`: tagged for the kill script, with its
 * env and cwd, as the user asked for (by uid[:gid] or by name, through util-linux `setpriv` or
 * busybox `start-stop-daemon`).
 * Arguments: exec id, cwd (or empty), user (or empty), then the command.
 */
export function wrapperScript(env: Record<string, string>): string {
  const exports = Object.entries(env)
    .map(([name, value]) => `export ${name}=${shellQuote(value)}`)
    .join('; ');
  return [
    `${EXEC_ID_ENV}=$1; export ${EXEC_ID_ENV}; cwd=$2; user=$3; shift 3`,
    exports,
    'if [ -n "$cwd" ]; then cd -- "$cwd" || exit 126; fi',
    'if [ -n "$user" ]; then',
    '  case "$user" in *:*) uid=${user%%:*}; gid=${user#*:};; *) uid=$user; gid=;; esac',
    '  case "$uid" in ""|*[!0-9]*) name=$uid; uid=$(id -u -- "$name") || exit 126; [ -n "$gid" ] || gid=$(id -g -- "$name") || exit 126;; esac',
    '  [ -n "$gid" ] || gid=$(id -g -- "$uid" 2>/dev/null) || gid=$uid',
    // util-linux setpriv (Debian); busybox's lacks --reuid but has start-stop-daemon -c.
    '  if setpriv --help 2>&1 | grep -q -e --reuid; then exec setpriv --reuid="$uid" --regid="$gid" --clear-groups -- "$@"; fi',
    '  program=$(command -v -- "$1") || { echo "$1: not found" >&2; exit 127; }; shift',
    '  exec start-stop-daemon -S -p /nonexistent/gym.pid -c "$uid:$gid" -x "$program" -- "$@"',
    'fi',
    'exec "$@"',
  ]
    .filter((line) => line !== '')
    .join('\n');
}

/**
 * The prefix of a command whose stdin carries exactly `length` bytes and is never ended:
 * `head -c` passes them on and ends the command's stdin (the pipeline's status is the command's).
 */
function boundedStdin(length: number): string[] {
  return ['sh', '-c', 'n=$1; shift; head -c "$n" | "$@"', 'gym-stdin', String(length)];
}

function emptyResult(status: ExecStatus): ExecResult {
  return {
    status,
    exitCode: null,
    stdout: '',
    stderr: '',
    stdoutTruncated: false,
    stderrTruncated: false,
    stdoutBytes: 0,
    stderrBytes: 0,
    durationMs: 0,
  };
}

export class PodCommands {
  readonly #kubeConfig: KubeConfig;
  readonly #target: (id: string) => PodTarget;
  readonly #pods: Pods;
  readonly #processes: PodProcesses;
  readonly #oomCounts: OomKillCounts;
  /** The provider's `get`: throws SANDBOX_NOT_FOUND when the sandbox is not there. */
  readonly #get: (id: string) => Promise<unknown>;

  constructor(
    kubeConfig: KubeConfig,
    target: (id: string) => PodTarget,
    pods: Pods,
    processes: PodProcesses,
    oomCounts: OomKillCounts,
    get: (id: string) => Promise<unknown>,
  ) {
    this.#kubeConfig = kubeConfig;
    this.#target = target;
    this.#pods = pods;
    this.#processes = processes;
    this.#oomCounts = oomCounts;
    this.#get = get;
  }

  /**
   * Says why a command ended without a normal exit: the OOM killer struck (the Pod's container
   * ended `OOMKilled`, or the OOM counter in its cgroup went up), the Pod is gone (deleted,
   * evicted, ended otherwise), or something else killed it.
   *
   * A kubelet 1.28+ on cgroup v2 sets `memory.oom.group`: an OOM kill then ends every process of
   * the container, which terminates with reason `OOMKilled`. The kubelet reports that end a
   * moment after the exec stream breaks, so a Pod that still looks running but cannot be probed
   * is read again for a few seconds before it is called gone.
   */
  async classifyAbnormalEnd(id: string): Promise<AbnormalEnd> {
    let pod = await this.#pods.readOrNull(id);
    if (pod === null) return 'sandbox_gone';
    if (endedOutOfMemory(pod)) return POD_OOM_LOSS;
    if (podState(pod) === 'ready') {
      const probe = await runPodCommand(
        this.#kubeConfig,
        this.#target(id),
        ['sh', '-c', OOM_COUNTER_COMMAND],
        {
          maxBytes: 4096,
          timeoutMs: 10_000,
        },
      ).catch(() => null);
      if (probe !== null && probe.end.kind === 'exited' && probe.end.exitCode === 0)
        return this.#oomCounts.classify(id, parseOomKillCount(probe.stdout.toString('utf8')));
    }
    for (const delayMs of OOM_REPORT_WAITS_MS) {
      // Deleted, or its container's end already reported (evicted, exited): nothing more will come.
      if (podState(pod) === 'destroying' || sandboxContainer(pod)?.state?.terminated !== undefined) break;
      await new Promise((resolve) => setTimeout(resolve, delayMs));
      pod = await this.#pods.readOrNull(id);
      if (pod === null) return 'sandbox_gone';
      if (endedOutOfMemory(pod)) return POD_OOM_LOSS;
    }
    return 'sandbox_gone';
  }

  /** The hooks a session's command ends through. */
  hooks(id: string): ExecHooks {
    return { classifyAbnormalEnd: () => this.classifyAbnormalEnd(id) };
  }

  /** A session shell as `user`, whose timeouts kill only the command's processes. */
  openSession(id: string, user: string | undefined): Promise<ShellSession> {
    const wrapper = ['sh', '-c', wrapperScript({}), 'gym-session', createId('exec'), '', user ?? ''];
    // Only the command's processes: the session's shell shares the exec's session.
    return openPodSession(this.#kubeConfig, this.#target(id), wrapper, (execId) =>
      this.#processes.killTagged(id, execId, 'tagged-only'),
    );
  }

  /**
   * The result or error of a command whose exec the API refused: a Pod not there at all is
   * SANDBOX_NOT_FOUND, one there but not running a `sandbox_gone` result (by the OOM killer, when
   * it ended the container), any other refusal the cluster's fault.
   */
  async refused(id: string, error: PodExecRefused): Promise<ExecResult> {
    // 404: no such Pod; 400: the Pod exists but does not run (ended, or being deleted).
    if (error.httpStatus === 404 || error.httpStatus === 400) {
      await this.#get(id); // throws SANDBOX_NOT_FOUND when the Pod is not there at all
      // A Pod whose container the OOM killer ended is the commands' loss, not the cluster's.
      const pod = await this.#pods.readOrNull(id);
      if (pod !== null && endedOutOfMemory(pod))
        return markSandboxLost(emptyResult('sandbox_gone'), POD_OOM_LOSS.lost, POD_OOM_LOSS.reason);
      return emptyResult('sandbox_gone');
    }
    throw new GymError(
      error.httpStatus === null ? 'PROVIDER_UNAVAILABLE' : 'PROVIDER_ERROR',
      `exec in sandbox ${id} failed: ${error.message}`,
      { details: { sandboxId: id, httpStatus: error.httpStatus }, cause: error },
    );
  }

  /** One command in its own exec, killed by its tag on a timeout or an abort. */
  async runOnce(id: string, request: ExecRequest, options: ExecOptions): Promise<ExecResult> {
    const execId = createId('exec');
    const argv = request.argv ?? ['sh', '-c', request.command!];
    const output = new ExecOutput(request, options);
    const wrapped = [
      'sh',
      '-c',
      wrapperScript(request.env),
      'gym-exec',
      execId,
      request.cwd ?? '',
      request.user ?? '',
      ...argv,
    ];
    const stdin = stdinBytes(request);
    // stdin is never ended (v4 cannot without losing the status): the command reads it through
    // `head -c`, which stops at its length and gives the command end-of-file.
    const command = stdin === null ? wrapped : [...boundedStdin(stdin.length), ...wrapped];
    const running = await startPodExec(this.#kubeConfig, this.#target(id), command, {
      stdin,
      keepStdinOpen: true,
      onStdout: (chunk) => output.push('stdout', chunk),
      onStderr: (chunk) => output.push('stderr', chunk),
    });

    let killing: Promise<KillOutcome> | null = null;
    let isCancelled = false;
    const kill = () => {
      if (killing !== null) return;
      killing = this.#processes.killTagged(id, execId, 'tagged-and-their-sessions');
      killing
        .then(
          (outcome) =>
            outcome === 'killed' && new Promise((resolve) => setTimeout(resolve, KILL_GRACE_MS).unref()),
          () => {},
        )
        .then(() => running.abandon());
    };
    const timer = setTimeout(kill, request.timeoutMs);
    const cancel = () => {
      isCancelled = true;
      kill();
    };
    if (options.signal?.aborted) cancel();
    else options.signal?.addEventListener('abort', cancel, { once: true });
    let end: PodExecEnd;
    try {
      end = await running.done;
    } finally {
      clearTimeout(timer);
      options.signal?.removeEventListener('abort', cancel);
    }
    if (killing !== null) {
      // The result says "timeout" only once the kill has finished: nothing it started runs on.
      // When the kill had to take the Pod, the command ran on until then, and resisting its kill
      // cost it the sandbox: its own doing.
      if ((await killing) === 'sandbox_killed') {
        output.push('stderr', KILL_FAILED_NOTE);
        return output.lost(isCancelled ? 'killed' : 'timeout', KILL_FAILED_REASON);
      }
      return output.result(isCancelled ? 'killed' : 'timeout', null);
    }
    if (end.kind === 'exited' && end.exitCode !== SIGKILL_EXIT_CODE) return output.result('ok', end.exitCode);
    return abnormalEndResult(
      output,
      await this.classifyAbnormalEnd(id),
      end.kind === 'exited' ? end.exitCode : null,
    );
  }
}
