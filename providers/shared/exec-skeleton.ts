/**
 * The part of running one command that is the same on every backend: the timer, the caller's
 * abort, one kill however many reasons ask for it, the output captured under the request's cap,
 * and the timer and listener released on every path. What differs (how the command starts and
 * ends, how every process of it is killed, what its end means) the provider passes in.
 */
import type { ExecRequest, ExecResult } from '../../core/schemas/exec.ts';
import type { ExecOptions } from '../sandbox-provider.ts';
import { ExecOutput } from './exec-output.ts';
import { KILL_FAILED_NOTE, KILL_FAILED_REASON, type KillOutcome } from './kill-script.ts';

/** How supervision ended a command, for the provider's classification. */
export interface Supervision<Outcome> {
  /** What `run` resolved with; undefined when it threw (`error`). */
  end: Outcome | undefined;
  /** What `run` threw, if it did. */
  error?: unknown;
  /** The timer fired before the command ended. */
  timedOut: boolean;
  /** The caller aborted before the command ended (and the timer had not fired). */
  aborted: boolean;
  /** What `kill` resolved with, once it ran (undefined when it never ran or threw). */
  killOutcome: KillOutcome | undefined;
}

export interface SupervisedCommand<Outcome> {
  /**
   * Starts the command and resolves once it ended, pushing its output into `output`. `stopped`
   * aborts once a kill has finished, for a transport that must then let go of a stream the
   * command's processes no longer hold.
   */
  run(output: ExecOutput, stopped: AbortSignal): Promise<Outcome>;
  /**
   * Kills every process of the command. Called at most once, on a timeout or an abort.
   * `sandbox_killed`: the kill did not take effect and the whole sandbox was killed; the result
   * is then the command's loss of its sandbox (the note in stderr), not `classify`'s.
   */
  kill(): Promise<KillOutcome | undefined>;
  /** Called when the kill took the whole sandbox, before that result is returned. */
  sandboxKilled?(): void;
  /** The result, from how the command ended. */
  classify(supervision: Supervision<Outcome>, output: ExecOutput): Promise<ExecResult> | ExecResult;
}

/** Runs one command under the request's timeout and the caller's abort signal. */
export async function superviseExec<Outcome>(
  request: Pick<ExecRequest, 'timeoutMs' | 'maxOutputBytes'>,
  options: Pick<ExecOptions, 'onOutput' | 'signal'>,
  command: SupervisedCommand<Outcome>,
): Promise<ExecResult> {
  const output = new ExecOutput(request, options);
  const stopped = new AbortController();
  let timedOut = false;
  let aborted = false;
  let killing: Promise<unknown> | null = null;
  let killOutcome: KillOutcome | undefined;
  const kill = () => {
    killing ??= command.kill().then(
      (outcome) => {
        killOutcome = outcome ?? undefined;
      },
      () => {},
    );
    void killing.finally(() => stopped.abort());
  };
  const timer = setTimeout(() => {
    if (aborted) return;
    timedOut = true;
    kill();
  }, request.timeoutMs);
  const onAbort = () => {
    if (timedOut) return;
    aborted = true;
    kill();
  };
  // As before the skeleton: a signal aborted before the command starts is the caller's to check.
  options.signal?.addEventListener('abort', onAbort, { once: true });
  let end: Outcome | undefined;
  let error: unknown;
  let threw = false;
  try {
    end = await command.run(output, stopped.signal);
  } catch (caught) {
    threw = true;
    error = caught;
  } finally {
    clearTimeout(timer);
    options.signal?.removeEventListener('abort', onAbort);
  }
  // A kill in flight finishes before the end is judged (its outcome is part of the verdict).
  if (killing !== null) await killing;
  // It ran on until the sandbox was killed: resisting its kill cost the command its sandbox.
  if (killOutcome === 'sandbox_killed') {
    command.sandboxKilled?.();
    output.push('stderr', KILL_FAILED_NOTE);
    return output.lost(aborted ? 'killed' : 'timeout', KILL_FAILED_REASON);
  }
  return command.classify({ end, ...(threw ? { error } : {}), timedOut, aborted, killOutcome }, output);
}
