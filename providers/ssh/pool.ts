/**
 * The SSH connections to one host, as many as its channels need. A session shell holds one SSH
 * channel for its whole life, and sshd's `MaxSessions` counts channels per connection, so a host
 * with many sessions needs several connections: when every channel of every open connection is
 * taken, the pool opens another, up to `maxConnections`; past that a command waits for a channel.
 *
 * Each member is an `SshConnection` to the same target, so every one checks the host key against
 * known_hosts, keeps alive and reconnects on its own. The first member stays; an extra one that
 * has carried nothing for `idleCloseMs` is closed. New channels go to the lowest member with a
 * free one, so extras drain and close once the load falls.
 *
 * A held channel (`start(..., { held: true })`: a session shell, a gateway relay) may take all
 * but one channel of a connection: the last is kept for short commands, so a timed-out session
 * command's kill (a short command) always gets a channel. A held channel the pool cannot place
 * (every connection at its held maximum) fails at once with CAPACITY_EXCEEDED rather than wait
 * for a session to end; a short command waits for a channel.
 */
import { GymError } from '../../core/errors.ts';
import type { Logger } from '../../core/logger.ts';
import {
  type RemoteExecOptions,
  type RemoteExit,
  type RemoteProcess,
  runToEnd,
  SshConnection,
  type SshTarget,
} from './connection.ts';

export interface SshPoolOptions {
  /** Connections to the host at most (each carries `target.maxChannels` channels). */
  maxConnections: number;
  /** An extra connection with no channel open this long is closed. */
  idleCloseMs: number;
}

export const DEFAULT_POOL = { maxConnections: 4, idleCloseMs: 30_000 } as const;

/** What the pool needs of a connection (an `SshConnection`; a fake in unit tests). */
export interface PoolMember {
  readonly name: string;
  readonly isUp: boolean;
  readonly lastError: GymError | null;
  readonly openChannels: number;
  /** Whether `start` takes a slot now, synchronously, without waiting. */
  readonly hasFreeChannel: boolean;
  start(command: string, options: Omit<RemoteExecOptions, 'stdin'>): Promise<RemoteProcess>;
  close(): void;
}

export interface StartOptions extends Omit<RemoteExecOptions, 'stdin'> {
  /** The channel stays open for long (a session shell, a relay): see the module comment. */
  held?: boolean;
}

/** After an extra connection failed to open, how long the pool waits for a channel instead of opening another. */
const EXTRA_RETRY_MS = 5_000;

export class SshPool {
  readonly target: SshTarget;
  readonly #logger: Logger;
  readonly #options: SshPoolOptions;
  readonly #members: PoolMember[];
  readonly #connect: () => PoolMember;
  readonly #idle = new Map<PoolMember, NodeJS.Timeout>();
  /** Held channels per member. */
  readonly #held = new Map<PoolMember, number>();
  readonly #waiting: Array<() => void> = [];
  #noExtraUntil = 0;
  #closed = false;

  constructor(
    target: SshTarget,
    logger: Logger,
    options: SshPoolOptions = DEFAULT_POOL,
    connect: (target: SshTarget, logger: Logger) => PoolMember = (to, log) => new SshConnection(to, log),
  ) {
    if (options.maxConnections < 1) throw new Error('an ssh pool needs at least one connection');
    this.target = target;
    this.#logger = logger;
    this.#options = options;
    this.#connect = () => connect(target, logger);
    this.#members = [this.#connect()];
  }

  /** Held channels one connection takes at most: all but one, unless it has only one. */
  get #heldLimit(): number {
    return Math.max(1, this.target.maxChannels - 1);
  }

  #heldOn(member: PoolMember): number {
    return this.#held.get(member) ?? 0;
  }

  get name(): string {
    return this.#members[0]!.name;
  }

  /** Whether the host's first connection is up now. */
  get isUp(): boolean {
    return this.#members[0]!.isUp;
  }

  get lastError(): GymError | null {
    return this.#members[0]!.lastError;
  }

  /** Channels open over every connection. */
  get openChannels(): number {
    return this.#members.reduce((sum, member) => sum + member.openChannels, 0);
  }

  /** Connections the pool holds now (open, or to be opened at their next use). */
  get connectionCount(): number {
    return this.#members.length;
  }

  /**
   * The member the next channel goes to, or null when the caller must wait: the lowest with a
   * free channel, else a new one while under the maximum. Synchronous, and the caller's `start`
   * takes the slot synchronously right after, so callers in one tick never pick the same last slot.
   */
  #pick(held: boolean): PoolMember | null {
    if (this.#closed) return this.#members[0]!;
    const free = this.#members.find(
      (member) => member.hasFreeChannel && (!held || this.#heldOn(member) < this.#heldLimit),
    );
    if (free !== undefined) return this.#claim(free);
    if (this.#members.length < this.#options.maxConnections && Date.now() >= this.#noExtraUntil) {
      const extra = this.#connect();
      this.#members.push(extra);
      return extra;
    }
    return null;
  }

  #claim(member: PoolMember): PoolMember {
    const timer = this.#idle.get(member);
    if (timer !== undefined) {
      clearTimeout(timer);
      this.#idle.delete(member);
    }
    return member;
  }

  /** A channel of `member` ended: wake a waiter, and start the idle clock of an extra that carries nothing. */
  #released(member: PoolMember): void {
    this.#waiting.shift()?.();
    if (member === this.#members[0] || member.openChannels > 0 || this.#idle.has(member)) return;
    const timer = setTimeout(() => {
      this.#idle.delete(member);
      if (member.openChannels > 0 || this.#closed) return;
      const index = this.#members.indexOf(member);
      if (index > 0) this.#members.splice(index, 1);
      member.close();
      this.#logger.debug(
        { host: this.name, connections: this.#members.length },
        'ssh: idle extra connection closed',
      );
    }, this.#options.idleCloseMs);
    timer.unref();
    this.#idle.set(member, timer);
  }

  /** Starts `command` on some connection (see `SshConnection.start`). */
  async start(command: string, options: StartOptions = {}): Promise<RemoteProcess> {
    const { held = false, ...io } = options;
    for (;;) {
      let member = this.#pick(held);
      while (member === null) {
        if (
          held &&
          this.#members.length >= this.#options.maxConnections &&
          this.#members.every((each) => this.#heldOn(each) >= this.#heldLimit)
        )
          throw new GymError(
            'CAPACITY_EXCEEDED',
            `ssh ${this.name}: every connection holds its most long-lived channels (${this.#options.maxConnections} connections × ${this.#heldLimit}); end a session or raise maxConnections`,
            { details: { host: this.target.host, port: this.target.port } },
          );
        await new Promise<void>((resolve) => this.#waiting.push(resolve));
        member = this.#pick(held);
      }
      const chosen = member;
      const isExtra = member !== this.#members[0];
      const wasUp = member.isUp;
      const starting = member.start(command, io);
      if (held) this.#held.set(member, this.#heldOn(member) + 1);
      const unhold = () => {
        if (held) this.#held.set(chosen, this.#heldOn(chosen) - 1);
      };
      let started: RemoteProcess;
      try {
        started = await starting;
      } catch (error) {
        unhold();
        this.#released(member);
        // An extra that cannot connect while the first one serves (the server limits connections):
        // wait for a channel there. A host key it refuses is never waited out: that is an error.
        const reason = String((error as GymError).details?.reason ?? '');
        if (
          isExtra &&
          !wasUp &&
          !member.isUp &&
          this.isUp &&
          !this.#closed &&
          !reason.startsWith('host-key')
        ) {
          this.#drop(member);
          this.#noExtraUntil = Date.now() + EXTRA_RETRY_MS;
          // Waiters look again once extras may be tried again.
          setTimeout(() => {
            for (const wake of this.#waiting.splice(0)) wake();
          }, EXTRA_RETRY_MS).unref();
          this.#logger.warn(
            { host: this.name, error: (error as Error).message },
            'ssh: an extra connection failed; waiting for a channel instead',
          );
          continue;
        }
        if (isExtra && !member.isUp) this.#drop(member);
        throw error;
      }
      const ended = () => {
        unhold();
        this.#released(chosen);
      };
      started.done.then(ended, ended);
      return started;
    }
  }

  #drop(member: PoolMember): void {
    const index = this.#members.indexOf(member);
    if (index > 0) this.#members.splice(index, 1);
    const timer = this.#idle.get(member);
    if (timer !== undefined) clearTimeout(timer);
    this.#idle.delete(member);
    this.#held.delete(member);
    member.close();
  }

  /** Runs `command` to its end on some connection (see `SshConnection.exec`). */
  async exec(command: string, options: RemoteExecOptions = {}): Promise<RemoteExit> {
    return runToEnd(await this.start(command, options), options.stdin);
  }

  close(): void {
    this.#closed = true;
    for (const timer of this.#idle.values()) clearTimeout(timer);
    this.#idle.clear();
    for (const member of this.#members) member.close();
    this.#members.splice(1);
    for (const wake of this.#waiting.splice(0)) wake();
  }
}
