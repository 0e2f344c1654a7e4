/**
 * The client's `Idempotency-Key`: every call that changes things carries one, a call whose
 * connection broke after it was sent goes once more with the same key, and the daemon runs it once.
 */
import { once } from 'node:events';
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import type { ProviderContext } from '../providers/sandbox-provider.ts';
import { startTestDaemon } from '../test/daemon-harness.ts';
import { MemoryProvider } from '../test/fixtures/memory-provider.ts';
import { GymClient } from './client.ts';

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** Reads each request; cuts the first one's connection without an answer (a daemon killed mid-request). */
async function cutFirstServer(): Promise<{ url: string; seen: IncomingMessage['headers'][] }> {
  const seen: IncomingMessage['headers'][] = [];
  const server = createServer((request, response) => {
    request.resume();
    request.on('end', () => {
      seen.push(request.headers);
      if (seen.length === 1) {
        request.socket.destroy();
        return;
      }
      response.writeHead(200, { 'content-type': 'application/json' });
      response.end(JSON.stringify({ status: 'ok', exitCode: 0, stdout: '', stderr: '' }));
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  cleanups.push(() => new Promise((resolve) => server.close(() => resolve())));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen };
}

describe('the client and Idempotency-Key', () => {
  it('sends a call cut off after it was sent once more, with the same key', async () => {
    const server = await cutFirstServer();
    const client = new GymClient({ url: server.url, token: 't' });
    expect((await client.exec('sbx-abcdefgh', { argv: ['true'] })).status).toBe('ok');
    expect(server.seen).toHaveLength(2);
    const keys = server.seen.map((headers) => headers['idempotency-key']);
    expect(keys[0]).toMatch(/^[0-9a-f-]{36}$/);
    expect(keys[1]).toBe(keys[0]);
  });

  it('does not send a call without a key again', async () => {
    const server = await cutFirstServer();
    const client = new GymClient({ url: server.url, token: 't' });
    await expect(client.keepalive('sbx-abcdefgh')).rejects.toMatchObject({ code: 'DAEMON_UNAVAILABLE' });
    expect(server.seen).toHaveLength(1);
    expect(server.seen[0]?.['idempotency-key']).toBeUndefined();
  });

  it('runs a create and an exec once per key against a daemon, and a fresh key per call by default', async () => {
    let provider: MemoryProvider | undefined;
    const daemon = await startTestDaemon(
      { providers: [{ name: 'memory' }] },
      {
        listen: true,
        factories: {
          memory: (_options: unknown, context: ProviderContext) => {
            provider = new MemoryProvider(context);
            return provider;
          },
        },
      },
    );
    cleanups.push(() => daemon.cleanup());
    const client = new GymClient({ url: daemon.address.url!, token: daemon.token });
    const created = await client.createSandbox({ image: 'img' }, { idempotencyKey: 'create-a' });
    expect((await client.createSandbox({ image: 'img' }, { idempotencyKey: 'create-a' })).id).toBe(
      created.id,
    );
    expect(provider!.sandboxes.size).toBe(1);
    await client.exec(created.id, { argv: ['echo'] }, { idempotencyKey: 'exec-a' });
    await client.exec(created.id, { argv: ['echo'] }, { idempotencyKey: 'exec-a' });
    expect(provider!.execs).toHaveLength(1);
    await client.exec(created.id, { argv: ['echo'] });
    await client.exec(created.id, { argv: ['echo'] });
    expect(provider!.execs).toHaveLength(3);
    await expect(
      client.exec(created.id, { argv: ['echo', 'other'] }, { idempotencyKey: 'exec-a' }),
    ).rejects.toMatchObject({ code: 'IDEMPOTENCY_KEY_MISMATCH' });
  });
});
