/**
 * Attacks on the daemon's API and its model gateway, as an agent inside a sandbox or anything
 * else that can reach the daemon without its token would try them (issue 9, item 1).
 */
import { connect } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ModelScriptSchema } from '../../harnesses/scripted-model/script.ts';
import { type ScriptedModelServer, startScriptedModelServer } from '../../harnesses/scripted-model/server.ts';
import type { ProviderContext } from '../../providers/sandbox-provider.ts';
import { startTestDaemon, type TestDaemon } from '../daemon-harness.ts';
import { MemoryProvider } from '../fixtures/memory-provider.ts';

let model: ScriptedModelServer;
let daemon: TestDaemon;

/** One raw HTTP/1.1 exchange, so nothing on our side normalises the request line. */
function rawRequest(
  target: { port?: number; socket?: string },
  head: string,
  body: Buffer | string = '',
  options: { waitMs?: number } = {},
): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const socket = target.socket === undefined ? connect(target.port!, '127.0.0.1') : connect(target.socket);
    let received = '';
    const timer = setTimeout(() => {
      socket.destroy();
      resolve({ status: 0, text: received });
    }, options.waitMs ?? 5_000);
    socket.on('data', (chunk) => {
      received += chunk.toString('latin1');
      const match = /^HTTP\/1\.1 (\d{3})/.exec(received);
      const headerEnd = received.indexOf('\r\n\r\n');
      const length = /content-length: (\d+)/i.exec(received);
      if (match && headerEnd !== -1 && length && received.length >= headerEnd + 4 + Number(length[1])) {
        clearTimeout(timer);
        socket.destroy();
        resolve({ status: Number(match[1]), text: received.slice(headerEnd + 4) });
      }
    });
    socket.on('error', (error) => {
      clearTimeout(timer);
      if (received !== '')
        resolve({ status: Number(/^HTTP\/1\.1 (\d{3})/.exec(received)?.[1] ?? 0), text: received });
      else reject(error);
    });
    socket.write(`${head}\r\nHost: localhost\r\nConnection: close\r\n\r\n`);
    if (body.length > 0) socket.write(body);
  });
}

function port(): number {
  return Number(new URL(daemon.address.url!).port);
}

async function openRollout(body: Record<string, unknown> = {}): Promise<Response> {
  return fetch(`${daemon.address.url}/v1/gateway/rollouts`, {
    method: 'POST',
    headers: { ...daemon.auth, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
}

beforeAll(async () => {
  model = await startScriptedModelServer(
    ModelScriptSchema.parse({ conversations: [{ replies: [{ content: 'hi' }] }] }),
  );
  daemon = await startTestDaemon(
    {
      providers: [{ name: 'memory' }],
      gateway: {
        upstream: { baseUrl: model.baseUrl, model: 'policy' },
        maxRetries: 0,
        maxRequestBytes: 256 * 1024,
        maxRecordBytesPerRollout: 64 * 1024,
      },
    },
    {
      factories: { memory: (_options: unknown, context: ProviderContext) => new MemoryProvider(context) },
      listen: true,
    },
  );
});

afterAll(async () => {
  await daemon.cleanup();
  await model.close();
});

describe('authorization is decided on the route that runs', () => {
  it('refuses to open a rollout through a URL fragment without the token', async () => {
    const body = JSON.stringify({ rolloutId: 'victim', upstream: { baseUrl: 'http://127.0.0.1:9/v1' } });
    const response = await rawRequest(
      { port: port() },
      `POST /v1/gateway/rollouts#/v1/ HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: ${body.length}`,
      body,
    );
    expect(response.status, response.text).toBe(401);
  });

  it.each([
    '/v1/sandboxes#/v1/',
    '/v1/gateway/rollouts/x/records#/v1/',
    '/v1/gateway/x/v1/../../rollouts',
    '/v1/gateway/rollouts;/v1/',
    '/v1/gateway/%2e%2e/v1/x',
  ])('refuses %s without the token', async (path) => {
    const response = await rawRequest({ port: port() }, `GET ${path} HTTP/1.1`);
    expect([401, 404]).toContain(response.status);
    if (response.status === 404) expect(response.text).not.toContain('"records"');
    expect(response.text).not.toContain('sandboxes":');
  });

  it('never hands out the key of a rollout that is already open, even to the token', async () => {
    const first = await openRollout({ rolloutId: 'ro-known-one' });
    expect(first.status).toBe(201);
    const { key } = (await first.json()) as { key: string };
    const again = await openRollout({ rolloutId: 'ro-known-one' });
    expect(again.status).toBe(409);
    expect(await again.text()).not.toContain(key);
  });

  it('refuses an upstream that is the daemon itself', async () => {
    for (const host of ['127.0.0.1', 'localhost', '[::1]', '0.0.0.0', '[::ffff:127.0.0.1]', '127.1.2.3']) {
      const response = await openRollout({
        upstream: { baseUrl: `http://${host}:${port()}/v1/gateway/x/v1` },
      });
      expect(response.status, host).toBe(400);
      expect(await response.text()).toMatch(/daemon itself/);
    }
  });

  it('refuses a model call that comes back from this gateway (a loop through another address)', async () => {
    const opened = (await (await openRollout()).json()) as { basePath: string; key: string };
    const looped = await fetch(`${daemon.address.url}${opened.basePath}/chat/completions`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${opened.key}`,
        'content-type': 'application/json',
        'x-gym-gateway-hop': daemon.daemonId,
      },
      body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'x' }] }),
    });
    expect(looped.status).toBe(508);
  });

  it('makes rollout ids and keys unguessable when the caller names none', async () => {
    const opened = (await (await openRollout()).json()) as { rolloutId: string; key: string };
    expect(opened.rolloutId).toMatch(/^ro-[a-z0-9]{16,}$/);
    expect(opened.key.length).toBeGreaterThanOrEqual(32);
  });
});

describe('the socket sandboxes reach serves only model routes', () => {
  const gatewaySocket = () => join(daemon.stateDir, 'gateway.sock');

  it.each([
    'GET /v1/sandboxes',
    'POST /v1/gateway/rollouts',
    'GET /healthz',
    'GET /metrics',
    'GET /v1/gateway/rollouts/x/records',
  ])('%s is not served there, even with the daemon token', async (line) => {
    const response = await rawRequest(
      { socket: gatewaySocket() },
      `${line} HTTP/1.1\r\nAuthorization: Bearer ${daemon.token}\r\nContent-Type: application/json\r\nContent-Length: 2`,
      '{}',
    );
    expect(response.status).toBe(404);
  });

  it('serves a model call with the rollout key', async () => {
    const opened = (await (await openRollout()).json()) as { basePath: string; key: string };
    const body = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hello' }] });
    const response = await rawRequest(
      { socket: gatewaySocket() },
      `POST ${opened.basePath}/chat/completions HTTP/1.1\r\nAuthorization: Bearer ${opened.key}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}`,
      body,
    );
    expect(response.status, response.text).toBe(200);
    expect(response.text).toContain('hi');
  });
});

describe('a model call is checked before its body is read', () => {
  it('answers a keyless 60 MiB request at once, without waiting for the body', async () => {
    const opened = (await (await openRollout()).json()) as { basePath: string };
    const response = await rawRequest(
      { port: port() },
      `POST ${opened.basePath}/chat/completions HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: ${60 * 1024 * 1024}`,
      Buffer.alloc(1024, 0x20),
      { waitMs: 3_000 },
    );
    expect(response.status).toBe(401);
  });

  it('answers an unknown rollout at once, as it answers a wrong key, without waiting for the body', async () => {
    const response = await rawRequest(
      { socket: join(daemon.stateDir, 'gateway.sock') },
      `POST /v1/gateway/ro-nobody/v1/chat/completions HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: ${60 * 1024 * 1024}`,
      Buffer.alloc(1024, 0x20),
      { waitMs: 3_000 },
    );
    expect(response.status).toBe(401);
  });
});

describe('recorded model calls are bounded and never silently empty', () => {
  it('refuses a request over the gateway limit with a clear error', async () => {
    const opened = (await (await openRollout()).json()) as { basePath: string; key: string };
    const response = await fetch(`${daemon.address.url}${opened.basePath}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${opened.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'x'.repeat(300 * 1024) }] }),
    });
    expect(response.status).toBe(413);
  });

  it('stops a rollout at its record budget and keeps every record it wrote', async () => {
    const opened = (await (await openRollout()).json()) as {
      rolloutId: string;
      basePath: string;
      key: string;
    };
    const call = () =>
      fetch(`${daemon.address.url}${opened.basePath}/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${opened.key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'y'.repeat(20 * 1024) }] }),
      });
    const statuses: number[] = [];
    for (let index = 0; index < 6; index += 1) statuses.push((await call()).status);
    expect(statuses.slice(0, 2)).toEqual([200, 200]);
    expect(statuses).toContain(413);
    const records = (await (
      await fetch(`${daemon.address.url}/v1/gateway/rollouts/${opened.rolloutId}/records`, {
        headers: daemon.auth,
      })
    ).json()) as { records: unknown[] };
    expect(records.records.length).toBe(statuses.filter((status) => status === 200).length);
  });
});

describe('calls in flight count against the record budget', () => {
  it('refuses a chunked request (no content-length) that would pass the budget', async () => {
    const opened = (await (await openRollout()).json()) as { basePath: string; key: string };
    const url = `${daemon.address.url}${opened.basePath}/chat/completions`;
    const body = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'z'.repeat(70 * 1024) }] });
    // A ReadableStream body goes out chunked, with no content-length for the gateway to trust.
    const chunked = await fetch(url, {
      method: 'POST',
      headers: { authorization: `Bearer ${opened.key}`, 'content-type': 'application/json' },
      body: new ReadableStream({
        start(controller) {
          controller.enqueue(new TextEncoder().encode(body));
          controller.close();
        },
      }),
      duplex: 'half',
    } as RequestInit);
    expect(chunked.status).toBe(413);
  });
});
