/**
 * The pool's placement rules with fake connections (the real-sshd test, pool.int.test.ts, covers
 * the SSH side): extras open when channels are taken and close when idle, a held channel leaves
 * each connection one slot for short commands, and what cannot be held fails at once.
 */
import { describe, expect, it } from 'vitest';
import { GymError } from '../../core/errors.ts';
import { silentLogger } from '../../core/logger.ts';
import { DEFAULT_TARGET, type RemoteProcess } from './connection.ts';
import { type PoolMember, SshPool } from './pool.ts';

/** A connection whose channels stay open until the test ends them. */
class FakeMember implements PoolMember {
  readonly name = 'root@fake';
  readonly isUp = true;
  readonly lastError = null;
  readonly ends: Array<() => void> = [];
  openChannels = 0;
  closed = false;
  readonly #max: number;

  constructor(max: number) {
    this.#max = max;
  }

  get hasFreeChannel(): boolean {
    return this.openChannels < this.#max;
  }

  async start(): Promise<RemoteProcess> {
    // Taken synchronously, as SshConnection's slot is.
    if (!this.hasFreeChannel) throw new Error('a fake connection was asked past its channels');
    this.openChannels += 1;
    let end!: () => void;
    const done = new Promise<{ code: number; signal: null }>((resolve) => {
      end = () => {
        this.openChannels -= 1;
        resolve({ code: 0, signal: null });
      };
    });
    this.ends.push(end);
    return {
      stdin: process.stdout,
      write: () => {},
      end,
      close: end,
      pause: () => {},
      resume: () => {},
      done,
    };
  }

  close(): void {
    this.closed = true;
  }
}

function fakePool(maxChannels: number, maxConnections: number, idleCloseMs = 60_000) {
  const members: FakeMember[] = [];
  const pool = new SshPool(
    { ...DEFAULT_TARGET, host: 'fake', username: 'root', knownHostsPath: '/dev/null', maxChannels },
    silentLogger,
    { maxConnections, idleCloseMs },
    () => {
      const member = new FakeMember(maxChannels);
      members.push(member);
      return member;
    },
  );
  return { pool, members };
}

const tick = () => new Promise((resolve) => setTimeout(resolve, 0));

describe('ssh connection pool (placement)', () => {
  it('opens a connection when every channel is taken, fills the lowest first, and closes idle extras', async () => {
    const { pool, members } = fakePool(2, 3, 50);
    const started = await Promise.all(Array.from({ length: 5 }, () => pool.start('cat')));
    expect(members.map((member) => member.openChannels)).toEqual([2, 2, 1]);
    for (const process of started) process.end();
    await tick();
    // A new channel goes to the first connection, not to an extra.
    const again = await pool.start('true');
    expect(members.map((member) => member.openChannels)).toEqual([1, 0, 0]);
    await new Promise((resolve) => setTimeout(resolve, 120));
    expect(pool.connectionCount).toBe(1);
    expect(members.map((member) => member.closed)).toEqual([false, true, true]);
    again.end();
  });

  it('waits for a channel past the last connection, and takes the first that frees', async () => {
    const { pool, members } = fakePool(2, 2);
    const held = await Promise.all(Array.from({ length: 4 }, () => pool.start('cat')));
    let fifth: RemoteProcess | null = null;
    const waiting = pool.start('true').then((process) => {
      fifth = process;
    });
    await tick();
    expect(fifth).toBeNull();
    held[3]!.end();
    await waiting;
    expect(members.map((member) => member.openChannels)).toEqual([2, 2]);
  });

  it('keeps one channel of each connection for short commands, and refuses a held channel it cannot place', async () => {
    const { pool, members } = fakePool(3, 2);
    const sessions = await Promise.all(Array.from({ length: 4 }, () => pool.start('sh', { held: true })));
    expect(members.map((member) => member.openChannels)).toEqual([2, 2]);
    const refused = await pool.start('sh', { held: true }).then(
      () => null,
      (error: unknown) => error,
    );
    expect(refused).toBeInstanceOf(GymError);
    expect((refused as GymError).code).toBe('CAPACITY_EXCEEDED');
    // A kill (a short command) still gets a channel while every session holds its own.
    const kill = await pool.start('kill');
    expect(members.map((member) => member.openChannels)).toEqual([3, 2]);
    kill.end();
    sessions[0]!.end();
    await tick();
    // A session that ended gives its place back.
    await pool.start('sh', { held: true });
    expect(members.map((member) => member.openChannels)).toEqual([2, 2]);
  });
});
