/**
 * The per-host connection pool against a real OpenSSH server with MaxSessions 10: long-held
 * channels (as session shells hold them) past one connection's limit open more connections, idle
 * extras close, and an extra connection still checks the host key.
 */
import { writeFile } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GymError } from '../../core/errors.ts';
import { silentLogger } from '../../core/logger.ts';
import { startSshd, type TestSshd } from '../../test/fixtures/sshd.ts';
import { DEFAULT_TARGET, type RemoteProcess } from './connection.ts';
import { SshPool, type SshPoolOptions } from './pool.ts';

let sshd: TestSshd;
const pools: SshPool[] = [];
const pool = (options: SshPoolOptions, knownHostsPath = sshd.knownHostsPath) => {
  const made = new SshPool(
    {
      ...DEFAULT_TARGET,
      host: sshd.host,
      port: sshd.port,
      username: 'root',
      privateKeyPath: sshd.clientKeyPath,
      knownHostsPath,
      maxChannels: 8,
    },
    silentLogger,
    options,
  );
  pools.push(made);
  return made;
};

/** A held channel: `cat`, answering each line written to it until its stdin ends. */
async function hold(from: SshPool): Promise<{ process: RemoteProcess; echo(text: string): Promise<string> }> {
  let received = '';
  let waiter: (() => void) | null = null;
  const process = await from.start('cat', {
    onStdout: (chunk) => {
      received += chunk.toString();
      waiter?.();
    },
  });
  return {
    process,
    async echo(text) {
      received = '';
      process.write(`${text}\n`);
      while (!received.endsWith('\n')) await new Promise<void>((resolve) => (waiter = resolve));
      return received.trim();
    },
  };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

beforeAll(async () => {
  sshd = await startSshd({ host: '127.0.0.10', port: 28000 + (process.pid % 1000), maxSessions: 10 });
});
afterAll(async () => {
  for (const made of pools) made.close();
  await sshd?.cleanup();
});

describe('ssh connection pool', () => {
  it('holds 25 channels at once against MaxSessions 10, then closes the idle extras', async () => {
    const hosts = pool({ maxConnections: 4, idleCloseMs: 300 });
    const held = await Promise.all(Array.from({ length: 25 }, () => hold(hosts)));
    // Every channel is open at once and answers.
    expect(hosts.openChannels).toBe(25);
    expect(hosts.connectionCount).toBe(4);
    expect(await Promise.all(held.map((channel, index) => channel.echo(`n${index}`)))).toEqual(
      held.map((_, index) => `n${index}`),
    );
    // One-shot commands still run while they are held (a slot is free on the fourth connection).
    expect(await hosts.exec('true')).toEqual({ code: 0, signal: null });
    for (const channel of held) channel.process.end();
    await Promise.all(held.map((channel) => channel.process.done));
    expect(hosts.openChannels).toBe(0);
    await sleep(600);
    expect(hosts.connectionCount).toBe(1);
    expect(hosts.isUp).toBe(true);
    expect(await hosts.exec('echo still')).toEqual({ code: 0, signal: null });
  });

  it('queues a channel past its maximum until one is given back', async () => {
    const hosts = pool({ maxConnections: 2, idleCloseMs: 60_000 });
    const held = await Promise.all(Array.from({ length: 16 }, () => hold(hosts)));
    let seventeenth: Awaited<ReturnType<typeof hold>> | null = null;
    const waiting = hold(hosts).then((channel) => {
      seventeenth = channel;
    });
    await sleep(300);
    expect(seventeenth).toBeNull();
    expect(hosts.connectionCount).toBe(2);
    held[3]!.process.end();
    await waiting;
    expect(await seventeenth!.echo('late')).toBe('late');
    for (const channel of [...held, seventeenth!]) channel.process.end();
    await Promise.all(held.map((channel) => channel.process.done));
  });

  it('refuses an extra connection whose host key no longer matches', async () => {
    const knownHosts = `${sshd.directory}/known_hosts.pool`;
    await writeFile(knownHosts, `[${sshd.host}]:${sshd.port} ${sshd.hostPublicKey}\n`);
    const hosts = pool({ maxConnections: 3, idleCloseMs: 60_000 }, knownHosts);
    const held = await Promise.all(Array.from({ length: 8 }, () => hold(hosts)));
    await writeFile(
      knownHosts,
      `[${sshd.host}]:${sshd.port} ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBr6mV3R8yPqT0aF9jWlZ2l0c0zXq6b7lJm0hD0hLQqE\n`,
    );
    const refused = await hosts.start('true').then(
      () => null,
      (error: unknown) => error,
    );
    expect(refused).toBeInstanceOf(GymError);
    expect((refused as GymError).details.reason).toBe('host-key-mismatch');
    expect(hosts.connectionCount).toBe(1);
    for (const channel of held) channel.process.end();
    await Promise.all(held.map((channel) => channel.process.done));
  });
});
