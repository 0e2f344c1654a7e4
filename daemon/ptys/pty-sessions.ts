/**
 * The daemon's terminals (PTY sessions): opened through the sandbox's provider (`openPty`), their
 * output kept in a bounded window per session (`output-ring.ts`), read from any offset still held,
 * written to, resized, signalled, waited for, and closed. A session lives in the daemon, not in
 * the client that opened it: another process re-attaches by its id and replays from an offset
 * (NeMo Gym's `SupportsSandboxPtyAttach`); one client holds it at a time (`attachment`), and a
 * takeover makes the evicted holder's next call fail with `PTY_DETACHED`.
 *
 * What an agent can make big stays bounded: each session holds at most `ringBytes` of each stream
 * however much it prints (the provider's transport is read without pause, so the program is never
 * blocked by a slow reader, and the oldest bytes go), and a sandbox has at most `maxPerSandbox`
 * sessions. Signals and the end of a session go to the processes carrying the session's tag
 * (`providers/shared/pty-channel.ts`); a session ends with its sandbox (`forget`), and at the
 * daemon's shutdown, since its transport lives in the daemon.
 */
import { GymError } from '../../core/errors.ts';
import { createId } from '../../core/ids.ts';
import type { Logger } from '../../core/logger.ts';
import { ExecRequestSchema } from '../../core/schemas/exec.ts';
import {
  type PtyAttachment,
  PtyAttachRequestSchema,
  type PtyCreateRequest,
  PtyCreateRequestSchema,
  type PtyInfo,
  type PtyOutput,
  PtyReadQuerySchema,
  PtyResizeRequestSchema,
  PtySignalRequestSchema,
  PtyWaitQuerySchema,
  PtyWriteRequestSchema,
} from '../../core/schemas/pty.ts';
import { parseOrThrow } from '../../core/validate.ts';
import type { SandboxProvider } from '../../providers/sandbox-provider.ts';
import { killScriptArgv } from '../../providers/shared/kill-script.ts';
import {
  type PtyChannel,
  type PtyEnd,
  ptyArgv,
  ptyEnvironment,
  ptySignalArgv,
} from '../../providers/shared/pty-channel.ts';
import { requirePty } from '../capabilities.ts';
import type { SandboxRecord } from '../state-store.ts';
import { OutputRing } from './output-ring.ts';

export interface PtyLimits {
  /** Sessions one sandbox may have at once (ended ones count until closed; the oldest ended goes first). */
  maxPerSandbox: number;
  /** Bytes of output kept per stream of a session: what a re-attach can replay. */
  ringBytes: number;
}

/**
 * Eight terminals per sandbox is more than any agent drives at once; 1 MiB of output each is what
 * NeMo Gym's facade expects a server to retain between polls (its `run_detached`), and bounds a
 * sandbox's terminals to 16 MiB of the daemon's memory whatever they print.
 */
export const DEFAULT_PTY_LIMITS: PtyLimits = { maxPerSandbox: 8, ringBytes: 1024 * 1024 };

/** How long a signal or the kill at close may take inside the sandbox. */
const PTY_CONTROL_TIMEOUT_MS = 15_000;

/** What the sessions need of the daemon's sandboxes. */
export interface PtySandboxes {
  /** @throws GymError `SANDBOX_NOT_FOUND`. */
  record(id: string): SandboxRecord;
  provider(name: string): SandboxProvider;
  /** Renews the lease: a terminal in use is a sandbox in use. */
  touch(record: SandboxRecord): Promise<void>;
}

interface Session {
  readonly id: string;
  readonly sandboxId: string;
  readonly provider: string;
  readonly tag: string;
  readonly command: string | null;
  readonly tty: boolean;
  readonly user: string | undefined;
  readonly createdAt: string;
  readonly stdout: OutputRing;
  readonly stderr: OutputRing;
  readonly channel: PtyChannel;
  rows: number;
  cols: number;
  end: PtyEnd | null;
  attachment: string | null;
  /** Called on new output and at the end, then cleared: readers and waiters waiting for either. */
  readonly wake: Set<() => void>;
}

export class PtySessions {
  readonly #sandboxes: PtySandboxes;
  readonly #logger: Logger;
  readonly #limits: PtyLimits;
  /** Sessions by sandbox id, then by session id (insertion order: oldest first). */
  readonly #bySandbox = new Map<string, Map<string, Session>>();
  /** Opens in flight per sandbox: they count against the limit, so parallel creates cannot pass it. */
  readonly #opening = new Map<string, number>();
  /** Set when the daemon stops: long polls answer at once, so they never hold its drain. */
  #isStopping = false;

  constructor(options: { sandboxes: PtySandboxes; logger: Logger; limits?: Partial<PtyLimits> }) {
    this.#sandboxes = options.sandboxes;
    this.#logger = options.logger;
    this.#limits = { ...DEFAULT_PTY_LIMITS, ...options.limits };
  }

  /**
   * Opens a session and holds it for the caller.
   * @throws GymError `SANDBOX_NOT_FOUND`, `VALIDATION_FAILED`, `CAPABILITY_UNSUPPORTED`,
   *   `PTY_LIMIT_REACHED`, and what the provider's `openPty` throws.
   */
  async create(sandboxId: string, input: unknown): Promise<PtyAttachment> {
    const record = this.#sandboxes.record(sandboxId);
    const provider = this.#sandboxes.provider(record.provider);
    const open = requirePty(record.provider, provider);
    const request = parseOrThrow(PtyCreateRequestSchema, input ?? {}, 'terminal request');
    this.#makeRoom(sandboxId);
    this.#opening.set(sandboxId, (this.#opening.get(sandboxId) ?? 0) + 1);
    try {
      return await this.#open(sandboxId, record, open, request);
    } finally {
      const left = (this.#opening.get(sandboxId) ?? 1) - 1;
      if (left === 0) this.#opening.delete(sandboxId);
      else this.#opening.set(sandboxId, left);
    }
  }

  async #open(
    sandboxId: string,
    record: SandboxRecord,
    open: NonNullable<SandboxProvider['openPty']>,
    request: PtyCreateRequest,
  ): Promise<PtyAttachment> {
    const tag = createId('exec');
    const id = createId('pty');
    const stdout = new OutputRing(this.#limits.ringBytes);
    const stderr = new OutputRing(request.tty ? 1 : this.#limits.ringBytes);
    const wake = new Set<() => void>();
    const wakeAll = () => {
      // Cleared first: a listener not done yet adds itself again for the next wake.
      const listeners = [...wake];
      wake.clear();
      for (const listener of listeners) listener();
    };
    await this.#sandboxes.touch(record);
    const channel = await open(
      sandboxId,
      {
        argv: ptyArgv(request.command),
        env: ptyEnvironment({ ...record.execEnv, ...request.env }, tag, request.tty),
        ...(request.cwd === undefined ? {} : { cwd: request.cwd }),
        ...(request.user === undefined ? {} : { user: request.user }),
        rows: request.rows,
        cols: request.cols,
        tty: request.tty,
      },
      {
        onOutput: (stream, chunk) => {
          (stream === 'stderr' && !request.tty ? stderr : stdout).write(chunk);
          wakeAll();
        },
      },
    );
    const session: Session = {
      id,
      sandboxId,
      provider: record.provider,
      tag,
      command: request.command ?? null,
      tty: request.tty,
      user: request.user,
      createdAt: new Date().toISOString(),
      stdout,
      stderr,
      channel,
      rows: request.rows,
      cols: request.cols,
      end: null,
      attachment: createId('att', 24),
      wake,
    };
    void channel.ended.then((end) => {
      session.end = end;
      wakeAll();
    });
    // A sandbox removed while its terminal opened: the transport is dropped, never kept.
    if (!this.#isLive(sandboxId)) {
      channel.close();
      throw new GymError(
        'SANDBOX_NOT_FOUND',
        `sandbox ${sandboxId} was destroyed while its terminal opened`,
        {
          details: { sandboxId },
        },
      );
    }
    let sessions = this.#bySandbox.get(sandboxId);
    if (sessions === undefined) {
      sessions = new Map();
      this.#bySandbox.set(sandboxId, sessions);
    }
    sessions.set(id, session);
    this.#logger.info({ sandboxId, ptyId: id, tty: request.tty }, 'terminal opened');
    return { pty: this.#info(session), attachment: session.attachment as string };
  }

  /** Every session of a sandbox, oldest first. @throws GymError `SANDBOX_NOT_FOUND`. */
  list(sandboxId: string): PtyInfo[] {
    this.#sandboxes.record(sandboxId);
    return [...(this.#bySandbox.get(sandboxId)?.values() ?? [])].map((session) => this.#info(session));
  }

  /**
   * The session now, or once it ended when `waitMs` is given (at most that long).
   * @throws GymError `SANDBOX_NOT_FOUND`, `PTY_NOT_FOUND`.
   */
  async get(sandboxId: string, ptyId: string, query: unknown = {}): Promise<PtyInfo> {
    const session = this.#session(sandboxId, ptyId);
    const { waitMs } = parseOrThrow(PtyWaitQuerySchema, query ?? {}, 'query');
    await this.#waitFor(session, waitMs, () => session.end !== null);
    return this.#info(session);
  }

  /**
   * Holds the session for a new client, evicting the current holder with `takeover` (the default).
   * @throws GymError `PTY_HELD` (held, and no takeover), `PTY_NOT_FOUND`, `SANDBOX_NOT_FOUND`.
   */
  attach(sandboxId: string, ptyId: string, input: unknown): PtyAttachment {
    const session = this.#session(sandboxId, ptyId);
    const { takeover } = parseOrThrow(PtyAttachRequestSchema, input ?? {}, 'attach request');
    if (session.attachment !== null && !takeover)
      throw new GymError('PTY_HELD', `terminal ${ptyId} is held by another client; attach with takeover`, {
        details: { sandboxId, ptyId },
      });
    session.attachment = createId('att', 24);
    return { pty: this.#info(session), attachment: session.attachment };
  }

  /** Lets go of the session (it lives on for the next attach). Idempotent; another holder's attachment is left alone. */
  detach(sandboxId: string, ptyId: string, attachment: string): void {
    const session = this.#session(sandboxId, ptyId);
    if (session.attachment === attachment) session.attachment = null;
  }

  /**
   * Output from an offset (NeMo Gym's replay), waiting up to `waitMs` for some.
   * @throws GymError `PTY_DETACHED`, `PTY_NOT_FOUND`, `SANDBOX_NOT_FOUND`, `VALIDATION_FAILED`.
   */
  async read(sandboxId: string, ptyId: string, input: unknown): Promise<PtyOutput> {
    const session = this.#session(sandboxId, ptyId);
    const query = parseOrThrow(PtyReadQuerySchema, input ?? {}, 'query');
    this.#checkHolder(session, query.attachment);
    const ring = query.stream === 'stderr' ? session.stderr : session.stdout;
    const from = () => Math.max(query.since ?? ring.start, ring.start);
    await this.#waitFor(session, query.waitMs, () => ring.end > from() || session.end !== null);
    const read = ring.read(query.since, query.maxBytes);
    const next = read.offset + read.data.length;
    return {
      data: read.data.toString('base64'),
      offset: read.offset,
      next,
      dropped: read.dropped,
      eof: session.end !== null && next >= ring.end,
      state: this.#state(session),
      exitCode: session.end?.exitCode ?? null,
    };
  }

  /** @throws GymError `PTY_DETACHED`, `PTY_NOT_FOUND`, `SANDBOX_NOT_FOUND`, `SANDBOX_NOT_READY` (it ended). */
  write(sandboxId: string, ptyId: string, input: unknown): void {
    const session = this.#session(sandboxId, ptyId);
    const body = parseOrThrow(PtyWriteRequestSchema, input, 'write request');
    this.#checkHolder(session, body.attachment);
    this.#checkRunning(session);
    session.channel.write(Buffer.from(body.data, 'base64'));
  }

  /** @throws GymError as `write`. */
  async resize(sandboxId: string, ptyId: string, input: unknown): Promise<PtyInfo> {
    const session = this.#session(sandboxId, ptyId);
    const body = parseOrThrow(PtyResizeRequestSchema, input, 'resize request');
    this.#checkHolder(session, body.attachment);
    this.#checkRunning(session);
    await session.channel.resize(body.rows, body.cols);
    session.rows = body.rows;
    session.cols = body.cols;
    return this.#info(session);
  }

  /**
   * Sends a signal to every process of the session (the program and all it started).
   * @throws GymError as `write`, and `PROVIDER_ERROR` when the signal could not be sent.
   */
  async signal(sandboxId: string, ptyId: string, input: unknown): Promise<PtyInfo> {
    const session = this.#session(sandboxId, ptyId);
    const body = parseOrThrow(PtySignalRequestSchema, input, 'signal request');
    this.#checkHolder(session, body.attachment);
    this.#checkRunning(session);
    const result = await this.#control(session, ptySignalArgv(session.tag, body.signal));
    // Exit 1: no process carried the tag, the program had just ended; anything else is a failure.
    if (result.status !== 'ok' || (result.exitCode !== 0 && result.exitCode !== 1))
      throw new GymError('PROVIDER_ERROR', `could not send SIG${body.signal} to terminal ${ptyId}`, {
        details: { sandboxId, ptyId, status: result.status, exitCode: result.exitCode },
      });
    return this.#info(session);
  }

  /**
   * Ends the session: every process of it killed, its transport dropped, its output let go.
   * Idempotent: an unknown session of a live sandbox is success.
   * @throws GymError `SANDBOX_NOT_FOUND`.
   */
  async close(sandboxId: string, ptyId: string): Promise<void> {
    this.#sandboxes.record(sandboxId);
    const session = this.#bySandbox.get(sandboxId)?.get(ptyId);
    if (session === undefined) return;
    this.#bySandbox.get(sandboxId)?.delete(ptyId);
    await this.#end(session);
    this.#logger.info({ sandboxId, ptyId }, 'terminal closed');
  }

  /** A sandbox is gone: its sessions' transports are dropped and their output let go. */
  forget(sandboxId: string): void {
    const sessions = this.#bySandbox.get(sandboxId);
    if (sessions === undefined) return;
    this.#bySandbox.delete(sandboxId);
    for (const session of sessions.values()) this.#drop(session, 'its sandbox was removed');
  }

  /** The daemon is stopping: every waiting read and wait answers now, and later ones do not wait. */
  releaseWaiters(): void {
    this.#isStopping = true;
    for (const sessions of this.#bySandbox.values()) {
      for (const session of sessions.values()) {
        const listeners = [...session.wake];
        session.wake.clear();
        for (const listener of listeners) listener();
      }
    }
  }

  /** At the daemon's stop: every session ended (its transport lives in this process). */
  async closeAll(): Promise<void> {
    const all = [...this.#bySandbox.values()].flatMap((sessions) => [...sessions.values()]);
    this.#bySandbox.clear();
    await Promise.allSettled(all.map((session) => this.#end(session)));
  }

  /** Sessions, bytes held and reads or waits waiting now, over all sandboxes (for tests and metrics). */
  stats(): { sessions: number; heldBytes: number; waiting: number } {
    let sessions = 0;
    let heldBytes = 0;
    let waiting = 0;
    for (const map of this.#bySandbox.values()) {
      for (const session of map.values()) {
        sessions += 1;
        heldBytes += session.stdout.heldBytes + session.stderr.heldBytes;
        waiting += session.wake.size;
      }
    }
    return { sessions, heldBytes, waiting };
  }

  async #end(session: Session): Promise<void> {
    // Also after the program ended: what it left running in the background goes with it.
    await this.#control(session, killScriptArgv(session.tag, 'tagged-and-their-sessions')).catch(
      (error: unknown) =>
        this.#logger.warn(
          { sandboxId: session.sandboxId, ptyId: session.id, error: String(error) },
          'could not kill a terminal at close; its sandbox ends it',
        ),
    );
    this.#drop(session, 'closed');
  }

  #drop(session: Session, reason: string): void {
    session.channel.close();
    if (session.end === null) session.end = { exitCode: null, lost: reason };
    session.attachment = null;
    const listeners = [...session.wake];
    session.wake.clear();
    for (const listener of listeners) listener();
  }

  #control(session: Session, argv: string[]) {
    const provider = this.#sandboxes.provider(session.provider);
    const request = parseOrThrow(
      ExecRequestSchema,
      {
        argv,
        timeoutMs: PTY_CONTROL_TIMEOUT_MS,
        ...(session.user === undefined ? {} : { user: session.user }),
      },
      'terminal control',
    );
    return provider.exec(session.sandboxId, request);
  }

  /** Frees a place for one more session: the oldest ended one goes; with none ended, refused. */
  #makeRoom(sandboxId: string): void {
    const sessions = this.#bySandbox.get(sandboxId) ?? new Map<string, Session>();
    const count = sessions.size + (this.#opening.get(sandboxId) ?? 0);
    if (count < this.#limits.maxPerSandbox) return;
    const ended = [...sessions.values()].find((session) => session.end !== null);
    if (ended === undefined)
      throw new GymError(
        'PTY_LIMIT_REACHED',
        `sandbox ${sandboxId} has ${count} terminals running or opening, the most allowed; close one first`,
        { details: { sandboxId, maxPerSandbox: this.#limits.maxPerSandbox } },
      );
    sessions.delete(ended.id);
    this.#drop(ended, 'evicted for a new terminal');
  }

  #isLive(sandboxId: string): boolean {
    try {
      this.#sandboxes.record(sandboxId);
      return true;
    } catch {
      return false;
    }
  }

  #session(sandboxId: string, ptyId: string): Session {
    this.#sandboxes.record(sandboxId);
    const session = this.#bySandbox.get(sandboxId)?.get(ptyId);
    if (session === undefined)
      throw new GymError('PTY_NOT_FOUND', `sandbox ${sandboxId} has no terminal ${ptyId}`, {
        details: { sandboxId, ptyId },
      });
    return session;
  }

  #checkHolder(session: Session, attachment: string | undefined): void {
    if (attachment !== undefined && attachment !== session.attachment)
      throw new GymError('PTY_DETACHED', `terminal ${session.id} was taken over by another client`, {
        details: { sandboxId: session.sandboxId, ptyId: session.id },
      });
  }

  #checkRunning(session: Session): void {
    if (session.end !== null)
      throw new GymError('SANDBOX_NOT_READY', `terminal ${session.id} has ended`, {
        details: { sandboxId: session.sandboxId, ptyId: session.id, state: this.#state(session) },
      });
  }

  #waitFor(session: Session, waitMs: number, isDone: () => boolean): Promise<void> {
    if (waitMs === 0 || this.#isStopping || isDone()) return Promise.resolve();
    return new Promise((resolve) => {
      const check = () => {
        if (this.#isStopping || isDone()) finish();
        else session.wake.add(check);
      };
      const timer = setTimeout(() => finish(), waitMs);
      const finish = () => {
        clearTimeout(timer);
        session.wake.delete(check);
        resolve();
      };
      session.wake.add(check);
    });
  }

  #state(session: Session): PtyInfo['state'] {
    if (session.end === null) return 'running';
    return session.end.lost === undefined ? 'exited' : 'lost';
  }

  #info(session: Session): PtyInfo {
    return {
      id: session.id,
      sandboxId: session.sandboxId,
      command: session.command,
      tty: session.tty,
      rows: session.rows,
      cols: session.cols,
      state: this.#state(session),
      exitCode: session.end?.exitCode ?? null,
      ...(session.end?.lost === undefined ? {} : { reason: session.end.lost }),
      output: { start: session.stdout.start, end: session.stdout.end },
      held: session.attachment !== null,
      createdAt: session.createdAt,
    };
  }
}
