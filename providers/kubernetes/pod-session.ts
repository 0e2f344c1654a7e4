/**
 * A persistent shell in a Pod through one long-lived pods/exec stream (v5, so its stdin stays
 * open between commands): many small commands skip the cost of opening an exec each.
 *
 * The protocol is the Docker session's (`../docker/docker-session.ts`): each command runs in a
 * subshell with its own env, cwd and stdin, then the shell prints a random end marker with the
 * exit code on stdout and the marker on stderr; output is what comes before the markers. A
 * timeout runs the kill script for the command's exec id (not the session's processes), then
 * drops the session if its markers do not come.
 */
import { randomBytes } from 'node:crypto';
import { PassThrough } from 'node:stream';
import type { KubeConfig } from '@kubernetes/client-node';
import { createId } from '../../core/ids.ts';
import type { ExecRequest, ExecResult } from '../../core/schemas/exec.ts';
import type { ExecOptions } from '../sandbox-provider.ts';
import { ExecOutput, SIGKILL_EXIT_CODE, stdinBytes } from '../shared/exec-output.ts';
import { EXEC_ID_ENV } from '../shared/kill-script.ts';
import { printfFormatFor, shellJoin, shellQuote } from '../shared/shell.ts';
import { type PodTarget, type RunningPodExec, startPodExec } from './pod-exec.ts';

/** After a timeout kill, how long the session may take to print its markers before it is dropped. */
const KILL_GRACE_MS = 5_000;

/** Splits a stream at a marker: passes on what comes before it, keeps what follows. */
class MarkerScanner {
  readonly #marker: Buffer;
  readonly #onData: (chunk: Buffer) => void;
  #pending: Buffer = Buffer.alloc(0);
  #after: Buffer | null = null;

  constructor(marker: Buffer, onData: (chunk: Buffer) => void) {
    this.#marker = marker;
    this.#onData = onData;
  }

  /** The line after the marker, once it is complete. */
  get trailer(): string | null {
    if (this.#after === null) return null;
    const newline = this.#after.indexOf(0x0a);
    return newline === -1 ? null : this.#after.subarray(0, newline).toString('utf8');
  }

  push(chunk: Buffer): void {
    if (this.#after !== null) {
      this.#after = Buffer.concat([this.#after, chunk]);
      return;
    }
    const buffer = this.#pending.length === 0 ? chunk : Buffer.concat([this.#pending, chunk]);
    const index = buffer.indexOf(this.#marker);
    if (index !== -1) {
      this.#onData(buffer.subarray(0, index));
      this.#after = Buffer.from(buffer.subarray(index + this.#marker.length));
      this.#pending = Buffer.alloc(0);
      return;
    }
    const keep = Math.min(buffer.length, this.#marker.length - 1);
    this.#onData(buffer.subarray(0, buffer.length - keep));
    this.#pending = Buffer.from(buffer.subarray(buffer.length - keep));
  }
}

/** The shell text of one command: a subshell, then the end markers with its exit code. */
function commandScript(request: ExecRequest, execId: string, marker: string, input: Buffer | null): string {
  const assignments = [
    `${EXEC_ID_ENV}=${execId}`,
    ...Object.entries(request.env).map(([k, v]) => `${k}=${shellQuote(v)}`),
  ];
  const changeDirectory = request.cwd === undefined ? '' : `cd ${shellQuote(request.cwd)} || exit 126; `;
  const target = request.argv ? shellJoin(request.argv) : `sh -c ${shellQuote(request.command!)}`;
  const body = `( export ${assignments.join(' ')}; ${changeDirectory}exec ${target} )`;
  const withInput = input === null ? `${body} </dev/null` : `printf ${printfFormatFor(input)} | ${body}`;
  return `${withInput}\n__gym_rc=$?; printf '%s%s\\n' '${marker}' "$__gym_rc"; printf '%s\\n' '${marker}' >&2\n`;
}

interface RunningCommand {
  stdout: MarkerScanner;
  stderr: MarkerScanner;
  settle: (outcome: 'done' | 'lost') => void;
}

export interface SessionHooks {
  /** Why a command or the session ended abnormally. */
  classifyAbnormalEnd(): Promise<'sandbox_gone' | 'oom' | 'killed'>;
  /** Kills every process tagged with this exec id (not whole sessions: the shell is in ours). */
  killTagged(execId: string): Promise<void>;
}

export class PodSession {
  readonly #input: PassThrough;
  readonly #exec: RunningPodExec;
  #running: RunningCommand | null = null;
  #queue: Promise<unknown> = Promise.resolve();
  #isAlive = true;

  private constructor(input: PassThrough, exec: RunningPodExec) {
    this.#input = input;
    this.#exec = exec;
    exec.done.then(() => {
      this.#isAlive = false;
      this.#running?.settle('lost');
    });
  }

  /** Opens the shell: `sh` through `wrapper` (which applies the user), reading commands on stdin. */
  static async open(kubeConfig: KubeConfig, target: PodTarget, wrapper: string[]): Promise<PodSession> {
    const input = new PassThrough();
    let session: PodSession | null = null;
    const exec = await startPodExec(kubeConfig, target, [...wrapper, 'sh'], {
      stdin: input,
      onStdout: (chunk) => {
        if (session !== null) session.#output('stdout', chunk);
      },
      onStderr: (chunk) => {
        if (session !== null) session.#output('stderr', chunk);
      },
    });
    session = new PodSession(input, exec);
    return session;
  }

  get isAlive(): boolean {
    return this.#isAlive;
  }

  close(): void {
    this.#isAlive = false;
    this.#input.end();
    this.#exec.abandon();
  }

  /** Runs one command; commands on one session run one after another. */
  run(request: ExecRequest, options: ExecOptions, hooks: SessionHooks): Promise<ExecResult> {
    const result = this.#queue.then(() => this.#runNow(request, options, hooks));
    this.#queue = result.catch(() => {});
    return result;
  }

  #output(name: 'stdout' | 'stderr', chunk: Buffer): void {
    // Output with no command running (a straggling background job) belongs to no one.
    const running = this.#running;
    if (running === null) return;
    running[name].push(chunk);
    if (running.stdout.trailer !== null && running.stderr.trailer !== null) running.settle('done');
  }

  async #lostCause(hooks: SessionHooks): Promise<'sandbox_gone' | 'killed'> {
    return (await hooks.classifyAbnormalEnd()) === 'sandbox_gone' ? 'sandbox_gone' : 'killed';
  }

  async #runNow(request: ExecRequest, options: ExecOptions, hooks: SessionHooks): Promise<ExecResult> {
    const output = new ExecOutput(request, options);
    if (options.signal?.aborted) return output.result('killed', null);
    if (!this.#isAlive) return output.result(await this.#lostCause(hooks), null);
    const execId = createId('exec');
    const marker = `__gym_end_${randomBytes(12).toString('hex')}__`;
    const markerBytes = Buffer.from(marker);
    let settle!: (outcome: 'done' | 'lost') => void;
    const finished = new Promise<'done' | 'lost'>((resolve) => {
      settle = resolve;
    });
    const running: RunningCommand = {
      stdout: new MarkerScanner(markerBytes, (chunk) => output.push('stdout', chunk)),
      stderr: new MarkerScanner(markerBytes, (chunk) => output.push('stderr', chunk)),
      settle,
    };
    this.#running = running;
    this.#input.write(commandScript(request, execId, marker, stdinBytes(request)));

    let killing: Promise<void> | undefined;
    let isCancelled = false;
    const kill = () => {
      if (killing !== undefined) return;
      killing = hooks.killTagged(execId);
      killing
        .then(() => new Promise((resolve) => setTimeout(resolve, KILL_GRACE_MS).unref()))
        .then(() => {
          // The markers never came: the shell is wedged (or taken over). Drop it.
          if (this.#running === running) {
            this.close();
            running.settle('lost');
          }
        });
    };
    const timer = setTimeout(kill, request.timeoutMs);
    const cancel = () => {
      isCancelled = true;
      kill();
    };
    options.signal?.addEventListener('abort', cancel, { once: true });
    const outcome = await finished;
    clearTimeout(timer);
    options.signal?.removeEventListener('abort', cancel);
    this.#running = null;

    if (killing !== undefined) {
      // The result says "timeout" only once the kill script has finished.
      await killing;
      return output.result(isCancelled ? 'killed' : 'timeout', null);
    }
    if (outcome === 'lost') return output.result(await this.#lostCause(hooks), null);
    const exitCode = Number.parseInt(running.stdout.trailer ?? '', 10);
    if (!Number.isInteger(exitCode)) return output.result('killed', null);
    if (exitCode === SIGKILL_EXIT_CODE) {
      const cause = await hooks.classifyAbnormalEnd();
      return output.result(cause, cause === 'sandbox_gone' ? null : exitCode);
    }
    return output.result('ok', exitCode);
  }
}
