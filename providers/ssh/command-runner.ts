/**
 * The node side of the command runner (`runner-script.ts` is the host side): many commands over
 * one SSH exec channel, so the SSH user's shell start-up files run once per connection, not once
 * per command (sshd runs every exec channel as `$SHELL -c ...`, and Debian's bash reads
 * `~/.bashrc` even then: a 2 s rc file made every command 2 s).
 *
 * Frames both ways are `type (1 byte) | command id (uint32 BE) | length (uint32 BE) | payload`.
 * To the runner: `S` start (payload: the shell line), `I` stdin bytes, `E` end of stdin, `C`
 * output credit (uint32), `K` kill (the command's process group, SIGKILL). From it: `O` stdout,
 * `R` stderr, `A` stdin bytes written to the command (uint32), `X` exit (`c<code>` or
 * `s<SIGNAL>`). Each command may have `STDIN_WINDOW_BYTES` of stdin unacknowledged and the
 * runner's `OUTPUT_WINDOW_BYTES` of output ungranted, so a paused reader (a relay) holds back only
 * its own command, and neither side buffers more than a window per command.
 *
 * A `RemoteProcess` from here behaves as one from an exec channel: `close()` kills the command's
 * process group (a channel close only hung up on it), and the runner channel's end (the
 * connection dropped or closed) fails every command still running with the connection's error,
 * while the runner kills them on the host; a runner that dies under a live connection ends them
 * with an unknown exit, as a channel that closes without an exit status does.
 */
import { Writable } from 'node:stream';
import type { ClientChannel } from 'ssh2';
import type { GymError } from '../../core/errors.ts';
import type { RemoteExecOptions, RemoteExit, RemoteProcess } from './remote-process.ts';
import { RUNNER_MARKER, RUNNER_UNAVAILABLE, runnerLaunchLine } from './runner-script.ts';

/** Stdin bytes sent to one command before the runner acknowledges them. */
const STDIN_WINDOW_BYTES = 1024 * 1024;
/** The largest payload of one stdin frame. */
const STDIN_FRAME_BYTES = 32 * 1024;
/** What a start-up file may print before the runner's marker that is kept to find it and say why it failed. */
const PREAMBLE_KEPT_BYTES = 16 * 1024;
const HEADER_BYTES = 9;

export interface RunnerHooks {
  /** The error for a command started on a runner whose channel already ended. */
  lost(): GymError;
  /**
   * How the commands still running end when the runner's channel ends: with the connection's
   * error when it dropped; null while the connection is up (the runner itself died: their end is
   * unknown, as a channel's that closed without an exit status, never a success).
   */
  cutOff(): GymError | null;
  /** The error for a command closed before it ended whose caller aborted it. */
  stopped(): GymError;
  /** The error when the shell did not start the runner in time. */
  startTimedOut(timeoutMs: number): GymError;
}

/** How opening a runner went: a runner, or the reason this host cannot have one. */
export type RunnerOpening = { runner: CommandRunner } | { unavailable: string };

function frame(type: string, id: number, payload: Buffer = Buffer.alloc(0)): Buffer {
  const header = Buffer.alloc(HEADER_BYTES);
  header.write(type, 0, 'latin1');
  header.writeUInt32BE(id, 1);
  header.writeUInt32BE(payload.length, 5);
  return Buffer.concat([header, payload]);
}

function uint32(value: number): Buffer {
  const bytes = Buffer.alloc(4);
  bytes.writeUInt32BE(value);
  return bytes;
}

/** One command on the runner. */
class RunnerCommand {
  readonly id: number;
  readonly options: Omit<RemoteExecOptions, 'stdin'>;
  readonly done: Promise<RemoteExit>;
  settled = false;
  paused = false;
  /** Output credit owed to the runner while paused. */
  owed = 0;
  /** Stdin bytes the runner may still take. */
  credit = STDIN_WINDOW_BYTES;
  /** Stdin writes waiting for credit. */
  readonly waiting: Array<() => void> = [];
  #resolve!: (exit: RemoteExit) => void;
  #reject!: (error: unknown) => void;

  constructor(id: number, options: Omit<RemoteExecOptions, 'stdin'>) {
    this.id = id;
    this.options = options;
    this.done = new Promise((resolve, reject) => {
      this.#resolve = resolve;
      this.#reject = reject;
    });
  }

  settle(outcome: { exit: RemoteExit } | { error: unknown }): void {
    if (this.settled) return;
    this.settled = true;
    // Writes still waiting for credit are dropped, as writes after a channel's end are.
    for (const wake of this.waiting.splice(0)) wake();
    if ('exit' in outcome) this.#resolve(outcome.exit);
    else this.#reject(outcome.error);
  }
}

export class CommandRunner {
  readonly #channel: ClientChannel;
  readonly #hooks: RunnerHooks;
  readonly #commands = new Map<number, RunnerCommand>();
  #nextId = 1;
  #pending: Buffer = Buffer.alloc(0);
  #isOpen = true;

  private constructor(channel: ClientChannel, hooks: RunnerHooks) {
    this.#channel = channel;
    this.#hooks = hooks;
    channel.on('data', (chunk: Buffer) => this.#receive(chunk));
    // What the runner itself says on stderr (a Perl warning) carries no command's output.
    channel.stderr.resume();
    channel.on('close', () => this.#ended());
  }

  /**
   * Starts the runner over a channel that `openChannel` opens for a shell line. Resolves with the
   * runner once its marker came (whatever a start-up file printed before it is skipped), with
   * the reason when the host cannot run it (no perl, or it ended without its marker), and rejects
   * with `hooks.startTimedOut` when the marker did not come within `timeoutMs` (a start-up file
   * that blocks: waiting on would hang every command of the connection).
   */
  static async open(
    openChannel: (command: string) => Promise<ClientChannel>,
    hooks: RunnerHooks,
    timeoutMs: number,
  ): Promise<RunnerOpening> {
    const channel = await openChannel(runnerLaunchLine());
    return new Promise((resolve, reject) => {
      let preamble = Buffer.alloc(0);
      let stderr = '';
      let isSettled = false;
      const timer = setTimeout(() => {
        isSettled = true;
        channel.close();
        reject(hooks.startTimedOut(timeoutMs));
      }, timeoutMs);
      const onData = (chunk: Buffer) => {
        preamble = Buffer.concat([preamble, chunk]);
        const at = preamble.indexOf(RUNNER_MARKER);
        if (at < 0) {
          if (preamble.length > PREAMBLE_KEPT_BYTES) preamble = preamble.subarray(-PREAMBLE_KEPT_BYTES);
          return;
        }
        isSettled = true;
        clearTimeout(timer);
        channel.off('data', onData);
        const runner = new CommandRunner(channel, hooks);
        runner.#receive(preamble.subarray(at + RUNNER_MARKER.length));
        resolve({ runner });
      };
      channel.on('data', onData);
      channel.stderr.on('data', (chunk: Buffer) => {
        stderr = (stderr + chunk.toString()).slice(-2000);
      });
      channel.once('close', () => {
        if (isSettled) return;
        isSettled = true;
        clearTimeout(timer);
        const said = preamble.toString().split('\n');
        const reason = said.find((line) => line.startsWith(RUNNER_UNAVAILABLE));
        resolve({
          unavailable:
            reason?.slice(RUNNER_UNAVAILABLE.length) ??
            `the runner ended before it started: ${stderr.trim().slice(-500) || 'it said nothing'}`,
        });
      });
    });
  }

  /** False once its channel ended: the connection opens another for the next command. */
  get isOpen(): boolean {
    return this.#isOpen;
  }

  /** Starts `command` (a line for `/bin/sh -c`); the process behaves as one from an exec channel. */
  start(command: string, options: Omit<RemoteExecOptions, 'stdin'>): RemoteProcess {
    const id = this.#nextId++;
    const entry = new RunnerCommand(id, options);
    if (!this.#isOpen) {
      entry.settle({ error: this.#hooks.lost() });
      return this.#process(entry);
    }
    this.#commands.set(id, entry);
    this.#send(frame('S', id, Buffer.from(command)));
    const abort = () => this.#close(entry);
    if (options.signal?.aborted) queueMicrotask(abort);
    else options.signal?.addEventListener('abort', abort, { once: true });
    const forget = () => options.signal?.removeEventListener('abort', abort);
    entry.done.then(forget, forget);
    return this.#process(entry);
  }

  #process(entry: RunnerCommand): RemoteProcess {
    const stdin = new Writable({
      write: (chunk: Buffer, _encoding, callback) => {
        this.#writeStdin(entry, chunk).then(() => callback(), callback);
      },
      final: (callback) => {
        if (!entry.settled) this.#send(frame('E', entry.id));
        callback();
      },
    });
    // A write after the command ended is dropped, as on a channel: `done` says how it ended.
    stdin.on('error', () => {});
    return {
      stdin,
      write: (data) => {
        if (stdin.writable) stdin.write(data);
      },
      end: (data) => {
        if (!stdin.writable) return;
        if (data === undefined) stdin.end();
        else stdin.end(data);
      },
      close: () => this.#close(entry),
      pause: () => {
        entry.paused = true;
      },
      resume: () => {
        entry.paused = false;
        if (entry.owed > 0 && !entry.settled) this.#send(frame('C', entry.id, uint32(entry.owed)));
        entry.owed = 0;
      },
      done: entry.done,
    };
  }

  async #writeStdin(entry: RunnerCommand, chunk: Buffer): Promise<void> {
    for (let offset = 0; offset < chunk.length && !entry.settled; ) {
      if (entry.credit <= 0) {
        await new Promise<void>((resolve) => entry.waiting.push(resolve));
        continue;
      }
      const size = Math.min(STDIN_FRAME_BYTES, entry.credit, chunk.length - offset);
      entry.credit -= size;
      this.#send(frame('I', entry.id, chunk.subarray(offset, offset + size)));
      offset += size;
    }
  }

  /** Kills the command (its process group) and ends it as a closed channel would. */
  #close(entry: RunnerCommand): void {
    if (entry.settled) return;
    this.#commands.delete(entry.id);
    if (this.#isOpen) this.#send(frame('K', entry.id));
    entry.settle(
      entry.options.signal?.aborted
        ? { error: this.#hooks.stopped() }
        : { exit: { code: null, signal: null } },
    );
  }

  #send(bytes: Buffer): void {
    // Bounded without the channel's own backpressure: stdin by its window per command, the
    // rest are a few bytes per frame received.
    if (this.#isOpen) this.#channel.write(bytes);
  }

  #receive(chunk: Buffer): void {
    this.#pending = this.#pending.length === 0 ? chunk : Buffer.concat([this.#pending, chunk]);
    while (this.#pending.length >= HEADER_BYTES) {
      const length = this.#pending.readUInt32BE(5);
      if (this.#pending.length < HEADER_BYTES + length) break;
      const type = String.fromCharCode(this.#pending[0]!);
      const id = this.#pending.readUInt32BE(1);
      const payload = this.#pending.subarray(HEADER_BYTES, HEADER_BYTES + length);
      this.#pending = this.#pending.subarray(HEADER_BYTES + length);
      this.#dispatch(type, id, payload);
    }
  }

  #dispatch(type: string, id: number, payload: Buffer): void {
    const entry = this.#commands.get(id);
    if (entry === undefined) return;
    if (type === 'O' || type === 'R') {
      if (type === 'O') entry.options.onStdout?.(payload);
      else entry.options.onStderr?.(payload);
      if (entry.paused) entry.owed += payload.length;
      else this.#send(frame('C', id, uint32(payload.length)));
    } else if (type === 'A') {
      entry.credit += payload.readUInt32BE(0);
      for (const wake of entry.waiting.splice(0)) wake();
    } else if (type === 'X') {
      this.#commands.delete(id);
      const said = payload.toString('latin1');
      entry.settle({
        exit: said.startsWith('s')
          ? { code: null, signal: `SIG${said.slice(1)}` }
          : { code: Number(said.slice(1)), signal: null },
      });
    }
  }

  #ended(): void {
    this.#isOpen = false;
    const cut = [...this.#commands.values()];
    this.#commands.clear();
    if (cut.length === 0) return;
    const error = this.#hooks.cutOff();
    for (const entry of cut)
      entry.settle(error === null ? { exit: { code: null, signal: null } } : { error });
  }

  /** Ends the runner's channel: the runner kills what still runs and exits. */
  close(): void {
    this.#channel.close();
  }
}
