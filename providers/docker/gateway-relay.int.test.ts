/**
 * The relay's byte handling, against this process's own network namespace (loopback only): a
 * slow reader gets every byte, a client that half-closes after its request still gets the
 * answer, and the connection cap holds. Needs root and nsenter, as the relay itself does.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../../core/logger.ts';
import { GatewayRelays } from './gateway-relay.ts';

const BIG = Buffer.alloc(32 * 1024 * 1024, 7);

function readAll(socket: Socket): Promise<Buffer> {
  const chunks: Buffer[] = [];
  socket.on('data', (chunk: Buffer) => chunks.push(chunk));
  return new Promise((resolve, reject) => {
    socket.once('end', () => resolve(Buffer.concat(chunks)));
    socket.once('error', reject);
  });
}

describe('gateway relay byte handling', () => {
  let directory: string;
  let upstream: Server;
  let relays: GatewayRelays;
  let socketPath: string;
  let port: number;
  const warnings: unknown[][] = [];

  beforeAll(async () => {
    directory = await mkdtemp(join(tmpdir(), 'gym-relay-'));
    socketPath = join(directory, 'gateway.sock');
    // Answers "big" with 4 MiB at once, and anything else, after the client's end, with its bytes back.
    upstream = createServer({ allowHalfOpen: true }, (socket) => {
      const received: Buffer[] = [];
      socket.on('data', (chunk: Buffer) => {
        received.push(chunk);
        if (Buffer.concat(received).toString() === 'big') socket.end(BIG);
      });
      socket.on('end', () => {
        if (Buffer.concat(received).toString() !== 'big') socket.end(Buffer.concat(received));
      });
      socket.on('error', () => {});
    });
    await new Promise<void>((resolve) => upstream.listen(socketPath, resolve));
    relays = new GatewayRelays({
      maxConnections: 4,
      idleTimeoutMs: 5_000,
      logger: { ...silentLogger, warn: (...args: unknown[]) => void warnings.push(args) },
    });
    port = await relays.open('sbx-test', process.pid, 0, socketPath);
  });

  afterAll(async () => {
    relays?.closeAll();
    upstream?.close();
    await rm(directory, { recursive: true, force: true });
  });

  it('listens on a free port, answers the same port again, and on the port asked for', async () => {
    expect(port).toBeGreaterThan(0);
    expect(await relays.open('sbx-test', process.pid, 0, socketPath)).toBe(port);
    expect(await relays.portOf('sbx-test')).toBe(port);
    // What a restarted daemon does: open again on the port the sandbox had.
    relays.close('sbx-test');
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(await relays.portOf('sbx-test')).toBeUndefined();
    expect(await relays.open('sbx-test', process.pid, port, socketPath)).toBe(port);
  });

  it('delivers every byte to a reader that half-closed and waits before reading', async () => {
    const client = connect({ port, host: '127.0.0.1', allowHalfOpen: true });
    client.end('big');
    client.pause();
    await new Promise((resolve) => setTimeout(resolve, 500));
    const body = readAll(client);
    client.resume();
    expect((await body).equals(BIG)).toBe(true);
    client.destroy();
  });

  it('answers a client that half-closes after its request', async () => {
    const client = connect({ port, host: '127.0.0.1', allowHalfOpen: true });
    client.end('request then FIN');
    expect((await readAll(client)).toString()).toBe('request then FIN');
    client.destroy();
  });

  it('keeps at most the cap open and counts the rest as refused', async () => {
    const before = relays.stats().refusedTotal;
    const clients = await Promise.all(
      Array.from(
        { length: 6 },
        () =>
          new Promise<Socket>((resolve) => {
            const client = connect(port, '127.0.0.1', () => resolve(client));
            client.on('error', () => {});
          }),
      ),
    );
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(relays.stats()).toMatchObject({ listeners: 1, connections: 4 });
    expect(relays.stats().refusedTotal - before).toBe(2);
    // Said once, with the sandbox and the cap, not once per refusal (an agent could fill the log).
    const refusals = warnings.filter((args) => String(args[1]).includes('past its cap'));
    expect(refusals).toEqual([[{ sandboxId: 'sbx-test', maxConnections: 4 }, expect.any(String)]]);
    for (const client of clients) client.destroy();
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(relays.stats().connections).toBe(0);
  });
});
