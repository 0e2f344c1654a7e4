/**
 * A persistent shell attached to a sandbox through one `docker exec`: commands skip the cost of
 * creating an exec (about 50 ms here) and cost well under a millisecond each.
 *
 * Each command runs in a subshell (`( ... )`), so it sees exactly what a one-shot exec would:
 * its own env and cwd, stdin from the request (or /dev/null, never the session's own input), and
 * nothing it does (`exit`, `cd`, `export`) changes the session. After it the shell prints a
 * random end marker with the exit code on stdout, and the marker on stderr; output is everything
 * before the markers, so it is exact to the byte, trailing newline or not.
 *
 * With an exec confinement the shell starts through the exec helper and is moved into a cgroup
 * of its own before it reads its first command. A timeout kills that whole cgroup, the shell
 * included (an agent may have taken the shell over), and drops the session: the next command
 * opens a new one. After a command ends normally, what it left running in the background moves
 * to the container's cgroup, so a later timeout spares it, as it would a one-shot exec's jobs.
 */

import { randomBytes } from 'node:crypto';
import type { Duplex } from 'node:stream';
import type Docker from 'dockerode';
import { GymError } from '../../core/errors.ts';
import { createId } from '../../core/ids.ts';
import type { ExecRequest, ExecResult } from '../../core/schemas/exec.ts';
import type { ExecOptions } from '../sandbox-provider.ts';
import { ExecOutput, SIGKILL_EXIT_CODE, stdinBytes } from '../shared/exec-output.ts';
import { EXEC_ID_ENV } from '../shared/kill-script.ts';
import { printfFormatFor, shellJoin, shellQuote } from '../shared/shell.ts';
import { DockerStreamDemuxer } from './demux.ts';
import {
  confineExec,
  type ExecConfinement,
  GO_BYTE,
  killTagged,
  type OneShotHooks,
} from './one-shot-exec.ts';

/** After a timeout kill, how long the session may take to print its markers before it is dropped. */
const KILL_GRACE_MS = 5_000;

/** Finds a marker in a byte stream split into arbitrary chunks, passing through what comes before it. */
class MarkerScanner {
  readonly #marker: Buffer;
  readonly #onData: (chunk: Buffer) => void;
  #pending: Buffer = Buffer.alloc(0);
  #after: Buffer | null = null;

  constructor(marker: Buffer, onData: (chunk: Buffer) => void) {
    this.#marker = marker;
    this.#onData = onData;
  }

  /** The bytes after the marker up to and including a newline, once they have all arrived. */
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
    // Keep just enough of the end to complete a marker split across chunks.
    const keep = Math.min(buffer.length, this.#marker.length - 1);
    this.#onData(buffer.subarray(0, buffer.length - keep));
    this.#pending = Buffer.from(buffer.subarray(buffer.length - keep));
  }
}

interface RunningCommand {
  stdout: MarkerScanner;
  stderr: MarkerScanner;
  settle: (outcome: 'done' | 'lost') => void;
}

export function sessionScript(
  request: ExecRequest,
  execId: string,
  marker: string,
  input: Buffer | null,
): string {
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

/** The session shell's own cgroup, when it is confined. */
interface SessionCgroup {
  confinement: ExecConfinement;
  path: string;
  /** The shell's host pid: what stays in the cgroup between commands. */
  keep: ReadonlySet<number>;
}

export class DockerSession {
  readonly #container: Docker.Container;
  readonly #stream: Duplex;
  readonly #user: string | undefined;
  readonly #cgroup: SessionCgroup | null;
  #running: RunningCommand | null = null;
  #queue: Promise<unknown> = Promise.resolve();
  #isAlive = true;

  private constructor(
    container: Docker.Container,
    stream: Duplex,
    user: string | undefined,
    cgroup: SessionCgroup | null,
  ) {
    this.#container = container;
    this.#stream = stream;
    this.#user = user;
    this.#cgroup = cgroup;
    const demuxer = new DockerStreamDemuxer((name, payload) => {
      // Output with no command running (a straggling background job) belongs to no one.
      this.#running?.[name].push(payload);
      this.#checkDone();
    });
    stream.on('data', (chunk: Buffer) => demuxer.push(chunk));
    stream.on('error', () => {});
    const lost = () => {
      this.#isAlive = false;
      this.#running?.settle('lost');
    };
    stream.once('end', lost);
    stream.once('close', lost);
  }

  static async open(
    container: Docker.Container,
    user: string | undefined,
    confinement: ExecConfinement | null = null,
  ): Promise<DockerSession> {
    const sessionId = createId('exec');
    const exec = await container.exec({
      Cmd: confinement === null ? ['sh'] : [confinement.helperPath, 'sh'],
      Env: [`GYM_SESSION_ID=${sessionId}`],
      AttachStdin: true,
      AttachStdout: true,
      AttachStderr: true,
      Tty: false,
      ...(user === undefined ? {} : { User: user }),
    });
    const stream = (await exec.start({ hijack: true, stdin: true })) as Duplex;
    let cgroup: SessionCgroup | null = null;
    if (confinement !== null) {
      const confined = await confineExec(exec, confinement, `gym-${sessionId}`);
      if (confined === null) {
        // Fail closed: an unconfined shell's commands could outlive their timeouts. Closing its
        // stdin before the go byte makes the helper exit (125) without running anything.
        stream.end();
        stream.destroy();
        throw new GymError(
          'PROVIDER_ERROR',
          'could not move the session shell into its own cgroup; it was not started',
        );
      }
      cgroup = { confinement, path: confined.cgroup, keep: new Set([confined.pid]) };
      stream.write(GO_BYTE);
    }
    return new DockerSession(container, stream, user, cgroup);
  }

  get isAlive(): boolean {
    return this.#isAlive;
  }

  /** Runs one command; commands on one session run one after another. */
  run(request: ExecRequest, options: ExecOptions, hooks: OneShotHooks): Promise<ExecResult> {
    const result = this.#queue.then(() => this.#runNow(request, options, hooks));
    this.#queue = result.catch(() => {});
    return result;
  }

  close(): void {
    this.#isAlive = false;
    this.#stream.destroy();
  }

  /** Kills every process of the session (the shell too) and drops it. */
  async #killAll(execId: string, user: string | undefined, running: RunningCommand): Promise<void> {
    const cgroup = this.#cgroup;
    if (cgroup !== null) {
      await cgroup.confinement.cgroup.kill(cgroup.path).catch(() => {});
      this.close();
      await cgroup.confinement.cgroup.remove(cgroup.path);
      return;
    }
    await killTagged(this.#container, execId, 'tagged-only', user).catch(() => {});
    await new Promise((resolve) => setTimeout(resolve, KILL_GRACE_MS).unref());
    // The markers never came: the shell is wedged. Drop it; the next call opens a new one.
    if (this.#running === running) this.close();
  }

  /** A lost session is `sandbox_gone` when the sandbox is, else `killed` (the shell itself died). */
  async #lostCause(hooks: OneShotHooks): Promise<'sandbox_gone' | 'killed'> {
    return (await hooks.classifyAbnormalEnd()) === 'sandbox_gone' ? 'sandbox_gone' : 'killed';
  }

  #checkDone(): void {
    const running = this.#running;
    if (running && running.stdout.trailer !== null && running.stderr.trailer !== null) running.settle('done');
  }

  async #runNow(request: ExecRequest, options: ExecOptions, hooks: OneShotHooks): Promise<ExecResult> {
    const output = new ExecOutput(request, options);
    // Cancelled while it waited its turn: it never starts.
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
    this.#stream.write(sessionScript(request, execId, marker, stdinBytes(request)));

    let killing: Promise<void> | undefined;
    let isCancelled = false;
    const kill = () => {
      killing ??= this.#killAll(execId, request.user ?? this.#user, running);
    };
    const timer = setTimeout(kill, request.timeoutMs);
    // A caller that gives up (a streaming client that went away) cancels exactly as a timeout would.
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
      // With a cgroup the result waits for the kill: nothing the command started runs on after it.
      if (this.#cgroup !== null) await killing;
      return output.result(isCancelled ? 'killed' : 'timeout', null);
    }
    if (this.#cgroup !== null && outcome === 'done') {
      const { confinement, path, keep } = this.#cgroup;
      await confinement.cgroup.evacuate(path, keep);
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
