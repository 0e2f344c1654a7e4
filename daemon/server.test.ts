import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { VERSION } from '../core/version.ts';
import type { ProviderContext } from '../providers/sandbox-provider.ts';
import { startTestDaemon, type TestDaemon } from '../test/daemon-harness.ts';
import { MemoryProvider, type MemoryProviderOptions } from '../test/fixtures/memory-provider.ts';

let daemon: TestDaemon | undefined;
let provider: MemoryProvider;

async function start(
  options: MemoryProviderOptions = {},
  limits: Record<string, number> = {},
): Promise<TestDaemon> {
  daemon = await startTestDaemon(
    { providers: [{ name: 'memory', ...limits }] },
    {
      factories: {
        memory: (_options: unknown, context: ProviderContext) => {
          provider = new MemoryProvider(context, options);
          return provider;
        },
      },
    },
  );
  return daemon;
}

afterEach(async () => {
  await daemon?.cleanup();
  daemon = undefined;
});

async function create(test: TestDaemon, body: Record<string, unknown> = { image: 'img' }) {
  const response = await test.app.inject({
    method: 'POST',
    url: '/v1/sandboxes',
    headers: test.auth,
    payload: body,
  });
  expect(response.statusCode, response.body).toBe(201);
  return response.json() as { id: string; leaseExpiresAt: string; labels: Record<string, string> };
}

describe('HTTP API', () => {
  it('answers /healthz without a token with ok alone, and names each provider to the token', async () => {
    const test = await start();
    const anonymous = await test.app.inject({ method: 'GET', url: '/healthz' });
    expect(anonymous.statusCode).toBe(200);
    expect(anonymous.json()).toEqual({ ok: true });
    const response = await test.app.inject({ method: 'GET', url: '/healthz', headers: test.auth });
    expect(response.statusCode).toBe(200);
    expect(response.json()).toEqual({
      ok: true,
      version: VERSION,
      daemonId: test.daemonId,
      providers: { memory: { ok: true, message: 'memory' } },
    });
  });

  it.each(['/v1/sandboxes', '/metrics', '/openapi.json', '/v1/sandboxes/sbx-abcdefgh'])(
    'refuses %s without the right token',
    async (url) => {
      const test = await start();
      const missing = await test.app.inject({ method: 'GET', url });
      expect(missing.statusCode).toBe(401);
      expect(missing.headers['www-authenticate']).toBe('Bearer');
      expect(missing.json().error.code).toBe('UNAUTHORIZED');
      const wrong = await test.app.inject({
        method: 'GET',
        url,
        headers: { authorization: 'Bearer not-the-token' },
      });
      expect(wrong.statusCode).toBe(401);
      expect(wrong.json().error.message).toContain('wrong bearer token');
    },
  );

  it('keeps the token in a 0600 file', async () => {
    const test = await start();
    expect((await stat(join(test.stateDir, 'token'))).mode & 0o777).toBe(0o600);
  });

  it('creates, inspects, lists by label, renews, execs and destroys idempotently', async () => {
    const test = await start();
    const first = await create(test, { image: 'img', labels: { team: 'a' }, ttlSeconds: 60 });
    await create(test, { image: 'img', labels: { team: 'b' } });
    const inspected = await test.app.inject({
      method: 'GET',
      url: `/v1/sandboxes/${first.id}`,
      headers: test.auth,
    });
    expect(inspected.json()).toMatchObject({
      id: first.id,
      provider: 'memory',
      state: 'ready',
      labels: { team: 'a' },
      spec: { image: 'img', ttlSeconds: 60 },
    });

    const listed = await test.app.inject({
      method: 'GET',
      url: '/v1/sandboxes?label=team=a',
      headers: test.auth,
    });
    expect(listed.json().sandboxes.map((sandbox: { id: string }) => sandbox.id)).toEqual([first.id]);

    const renewed = await test.app.inject({
      method: 'POST',
      url: `/v1/sandboxes/${first.id}/keepalive`,
      headers: test.auth,
      payload: { ttlSeconds: 600 },
    });
    expect(renewed.statusCode).toBe(200);
    expect(Date.parse(renewed.json().leaseExpiresAt)).toBeGreaterThan(
      Date.parse(first.leaseExpiresAt) + 500_000,
    );

    const exec = await test.app.inject({
      method: 'POST',
      url: `/v1/sandboxes/${first.id}/exec`,
      headers: test.auth,
      payload: { argv: ['echo', 'hi'] },
    });
    expect(exec.json()).toMatchObject({ status: 'ok', exitCode: 0, stdout: 'echo hi\n' });

    for (let attempt = 0; attempt < 2; attempt += 1) {
      const deleted = await test.app.inject({
        method: 'DELETE',
        url: `/v1/sandboxes/${first.id}`,
        headers: test.auth,
      });
      expect(deleted.statusCode).toBe(204);
    }
    const gone = await test.app.inject({
      method: 'GET',
      url: `/v1/sandboxes/${first.id}`,
      headers: test.auth,
    });
    expect(gone.statusCode).toBe(404);
    expect(gone.json().error.code).toBe('SANDBOX_NOT_FOUND');
    expect(provider.sandboxes.has(first.id)).toBe(false);
  });

  it('answers a destroy the engine never finishes with PROVIDER_ERROR in bounded time, and finishes it later', async () => {
    daemon = await startTestDaemon(
      { providers: [{ name: 'memory' }], destroyWaitMs: 200 },
      {
        factories: {
          memory: (_options: unknown, context: ProviderContext) => {
            provider = new MemoryProvider(context);
            return provider;
          },
        },
      },
    );
    const test = daemon;
    const sandbox = await create(test);
    let release: () => void = () => {};
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    const destroy = provider.destroy.bind(provider);
    let calls = 0;
    provider.destroy = async (id: string) => {
      calls += 1;
      await held;
      await destroy(id);
    };
    const remove = () =>
      test.app.inject({ method: 'DELETE', url: `/v1/sandboxes/${sandbox.id}`, headers: test.auth });
    const first = await remove().finally(() => setTimeout(release, 5_000).unref());
    expect(first.statusCode).toBe(502);
    expect(first.json().error).toMatchObject({ code: 'PROVIDER_ERROR', details: { sandboxId: sandbox.id } });
    // A second request joins the destroy in flight instead of starting another.
    expect((await remove()).statusCode).toBe(502);
    expect(calls).toBe(1);
    expect(provider.sandboxes.has(sandbox.id)).toBe(true);
    release();
    await vi.waitFor(() => expect(provider.sandboxes.has(sandbox.id)).toBe(false));
    expect((await remove()).statusCode).toBe(204);
    expect(calls).toBe(1);
  });

  it('applies the daemon default TTL when a spec names none', async () => {
    const test = await start();
    const sandbox = await create(test);
    const inspected = await test.app.inject({
      method: 'GET',
      url: `/v1/sandboxes/${sandbox.id}`,
      headers: test.auth,
    });
    expect(inspected.json().spec.ttlSeconds).toBe(3600);
  });

  it('names the field of a schema violation and refuses bad JSON', async () => {
    const test = await start();
    const invalid = await test.app.inject({
      method: 'POST',
      url: '/v1/sandboxes',
      headers: test.auth,
      payload: { image: 'x', resources: { memoryMiB: -1 } },
    });
    expect(invalid.statusCode).toBe(400);
    expect(invalid.json().error).toMatchObject({
      code: 'VALIDATION_FAILED',
      details: { issues: [expect.objectContaining({ path: 'resources.memoryMiB' })] },
    });
    expect(invalid.json().error.message).toContain('resources.memoryMiB');

    const badJson = await test.app.inject({
      method: 'POST',
      url: '/v1/sandboxes',
      headers: { ...test.auth, 'content-type': 'application/json' },
      payload: '{"image": ',
    });
    expect(badJson.statusCode).toBe(400);
    expect(badJson.json().error.code).toBe('VALIDATION_FAILED');

    const sandbox = await create(test);
    const badExec = await test.app.inject({
      method: 'POST',
      url: `/v1/sandboxes/${sandbox.id}/exec`,
      headers: test.auth,
      payload: { argv: [], timeoutMs: -1 },
    });
    expect(badExec.statusCode).toBe(400);
    expect(badExec.json().error.message).toMatch(/argv.*timeoutMs|timeoutMs.*argv/s);

    const badQuery = await test.app.inject({
      method: 'GET',
      url: `/v1/sandboxes/${sandbox.id}/files?path=relative`,
      headers: test.auth,
    });
    expect(badQuery.statusCode).toBe(400);
    expect(badQuery.json().error.message).toContain('path');
  });

  it.each([
    ['GET', '/v1/sandboxes/sbx-doesnotexist1'],
    ['POST', '/v1/sandboxes/sbx-doesnotexist1/exec'],
    ['POST', '/v1/sandboxes/sbx-doesnotexist1/keepalive'],
    ['GET', '/v1/sandboxes/sbx-doesnotexist1/files?path=/etc/hosts'],
    ['GET', '/v1/sandboxes/not-even-an-id'],
  ] as const)('answers %s %s with 404 SANDBOX_NOT_FOUND', async (method, url) => {
    const test = await start();
    const payload = url.endsWith('/exec') ? { argv: ['true'] } : {};
    const response = await test.app.inject({
      method,
      url,
      headers: test.auth,
      ...(method === 'POST' ? { payload } : {}),
    });
    expect(response.statusCode).toBe(404);
    expect(response.json().error.code).toBe('SANDBOX_NOT_FOUND');
  });

  it('never lets a provider error carry its own HTTP status to the client', async () => {
    const engineError = Object.assign(new Error('(HTTP code 404) no such container - engine internals'), {
      statusCode: 404,
      reason: 'no such container',
    });
    const test = await start({ execError: engineError });
    const sandbox = await create(test);
    const response = await test.app.inject({
      method: 'POST',
      url: `/v1/sandboxes/${sandbox.id}/exec`,
      headers: test.auth,
      payload: { argv: ['true'] },
    });
    expect(response.statusCode).toBe(500);
    expect(response.json().error).toMatchObject({ code: 'INTERNAL', message: 'internal error' });
  });

  it('maps a typed provider error to its code', async () => {
    const test = await start();
    const response = await test.app.inject({
      method: 'POST',
      url: '/v1/sandboxes',
      headers: test.auth,
      payload: { image: 'missing' },
    });
    expect(response.statusCode).toBe(404);
    expect(response.json().error.code).toBe('IMAGE_NOT_FOUND');
    const unknownProvider = await test.app.inject({
      method: 'POST',
      url: '/v1/sandboxes',
      headers: test.auth,
      payload: { image: 'x', provider: 'nope' },
    });
    expect(unknownProvider.statusCode).toBe(400);
    expect(unknownProvider.json().error).toMatchObject({
      code: 'PROVIDER_NOT_FOUND',
      details: { available: ['memory'] },
    });
  });

  it('refuses a create beyond the live limit with 429 and a retry hint', async () => {
    const test = await start({}, { maxLiveSandboxes: 1, queueSize: 0 });
    await create(test);
    const refused = await test.app.inject({
      method: 'POST',
      url: '/v1/sandboxes',
      headers: test.auth,
      payload: { image: 'img' },
    });
    expect(refused.statusCode).toBe(429);
    expect(refused.json().error.code).toBe('CAPACITY_EXCEEDED');
    expect(refused.json().error.details.retryAfterMs).toBeGreaterThan(0);
  });

  it('refuses snapshots where the provider cannot take them', async () => {
    const test = await start();
    const sandbox = await create(test);
    const response = await test.app.inject({
      method: 'POST',
      url: `/v1/sandboxes/${sandbox.id}/snapshot`,
      headers: test.auth,
      payload: { image: 'x:1' },
    });
    expect(response.statusCode).toBe(501);
    expect(response.json().error.code).toBe('CAPABILITY_UNSUPPORTED');
  });

  it('moves files as raw bytes both ways', async () => {
    const test = await start();
    const sandbox = await create(test);
    const bytes = Buffer.from([0, 1, 2, 255, 254]);
    const put = await test.app.inject({
      method: 'PUT',
      url: `/v1/sandboxes/${sandbox.id}/files?path=/tmp/x.bin`,
      headers: { ...test.auth, 'content-type': 'application/octet-stream' },
      payload: bytes,
    });
    expect(put.statusCode).toBe(204);
    const get = await test.app.inject({
      method: 'GET',
      url: `/v1/sandboxes/${sandbox.id}/files?path=/tmp/x.bin`,
      headers: test.auth,
    });
    expect(get.headers['content-type']).toBe('application/octet-stream');
    expect(get.rawPayload.equals(bytes)).toBe(true);
    const missing = await test.app.inject({
      method: 'GET',
      url: `/v1/sandboxes/${sandbox.id}/files?path=/nope`,
      headers: test.auth,
    });
    expect(missing.json().error.code).toBe('FILE_NOT_FOUND');
  });

  it('streams exec output as NDJSON ending in the result', async () => {
    const test = await start();
    const sandbox = await create(test);
    const response = await test.app.inject({
      method: 'POST',
      url: `/v1/sandboxes/${sandbox.id}/exec?stream=ndjson`,
      headers: test.auth,
      payload: { argv: ['true'] },
    });
    expect(response.headers['content-type']).toBe('application/x-ndjson');
    const events = response.body
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line));
    expect(events.at(-1)).toMatchObject({ type: 'result', result: { status: 'ok', stdout: 'true\n' } });
  });

  it('answers an unknown route with ROUTE_NOT_FOUND', async () => {
    const test = await start();
    const response = await test.app.inject({ method: 'GET', url: '/v2/nothing', headers: test.auth });
    expect(response.statusCode).toBe(404);
    expect(response.json().error.code).toBe('ROUTE_NOT_FOUND');
  });

  // Found by the API fuzzer (test/fuzz): the router answered these in fastify's own shape.
  it.each([
    ['a path parameter over the router limit', `/v1/sandboxes/${'x'.repeat(101)}`, 'VALIDATION_FAILED'],
    ['a malformed escape in a path parameter', '/v1/sandboxes/%E0%A4%A', 'VALIDATION_FAILED'],
    ['a QUERY request without a content type (was a 500)', '/v1/sandboxes', 'VALIDATION_FAILED', 'QUERY'],
  ])('answers %s in our error shape', async (_what, url, code, method = 'GET') => {
    const test = await start();
    const response = await test.app.inject({ method: method as 'GET', url, headers: test.auth });
    expect(response.statusCode).toBe(400);
    expect(response.json()).toMatchObject({ error: { code, message: expect.any(String) } });
  });

  it('answers every request that sends no body alike with or without content-type: application/json', async () => {
    const test = await start();
    const document = (
      await test.app.inject({ method: 'GET', url: '/openapi.json', headers: test.auth })
    ).json() as { paths: Record<string, Record<string, { requestBody?: { required?: boolean } }>> };
    // A fresh resource for each request, so the two requests of a pair find the same state.
    const fresh = async (placeholder: string): Promise<string> => {
      if (placeholder === 'id') return (await create(test)).id;
      if (placeholder === 'name') {
        const name = `p${Math.random().toString(36).slice(2, 10)}`;
        const defined = await test.app.inject({
          method: 'PUT',
          url: `/v1/pools/${name}`,
          headers: test.auth,
          payload: { spec: { image: 'img' } },
        });
        expect(defined.statusCode, defined.body).toBe(201);
        return name;
      }
      const opened = await test.app.inject({
        method: 'POST',
        url: '/v1/gateway/rollouts',
        headers: test.auth,
        payload: { upstream: { baseUrl: 'http://127.0.0.9:9/v1' } },
      });
      expect(opened.statusCode, opened.body).toBe(201);
      return (opened.json() as { rolloutId: string }).rolloutId;
    };
    const urlOf = async (path: string) => {
      let url = path;
      for (const placeholder of path.match(/\{(\w+)\}/g) ?? []) {
        url = url.replace(placeholder, await fresh(placeholder.slice(1, -1)));
      }
      return url;
    };
    const asked: string[] = [];
    for (const [path, operations] of Object.entries(document.paths)) {
      for (const [method, operation] of Object.entries(operations)) {
        if (!['post', 'put', 'delete'].includes(method) || operation.requestBody?.required === true) continue;
        asked.push(`${method} ${path}`);
        const plain = await test.app.inject({
          method: method.toUpperCase() as 'POST',
          url: await urlOf(path),
          headers: test.auth,
        });
        for (const contentType of [
          'application/json',
          'application/json; charset=utf-8',
          'Application/JSON',
        ]) {
          for (const payload of ['', ' \r\n']) {
            const typed = await test.app.inject({
              method: method.toUpperCase() as 'POST',
              url: await urlOf(path),
              headers: { ...test.auth, 'content-type': contentType },
              payload,
            });
            expect(typed.statusCode, `${method} ${path} as ${contentType}: ${typed.body}`).toBe(
              plain.statusCode,
            );
          }
        }
      }
    }
    // The routes of the issue's report are among them (and the document did list some).
    expect(asked).toEqual(expect.arrayContaining(['delete /v1/snapshots/{id}', 'delete /v1/sandboxes/{id}']));
    expect(asked.length).toBeGreaterThan(8);
  });

  it('exposes Prometheus metrics: sandboxes by state, latencies, errors by code', async () => {
    const test = await start();
    const sandbox = await create(test);
    await test.app.inject({
      method: 'POST',
      url: `/v1/sandboxes/${sandbox.id}/exec`,
      headers: test.auth,
      payload: { argv: ['true'], session: 's' },
    });
    await test.app.inject({ method: 'GET', url: '/v1/sandboxes/sbx-doesnotexist1', headers: test.auth });
    const text = (await test.app.inject({ method: 'GET', url: '/metrics', headers: test.auth })).body;
    expect(text).toContain('gym_sandboxes{provider="memory",state="ready"} 1');
    expect(text).toMatch(/gym_sandbox_create_seconds_count\{provider="memory",outcome="ok"\} 1/);
    expect(text).toMatch(/gym_exec_seconds_count\{provider="memory",mode="session",status="ok"\} 1/);
    expect(text).toContain('gym_api_errors_total{code="SANDBOX_NOT_FOUND"} 1');
    // The process's own memory, which a soak watches for leaks.
    const heapUsed = Number(/gym_process_memory_bytes\{kind="heap_used"\} (\d+)/.exec(text)?.[1]);
    const rss = Number(/gym_process_memory_bytes\{kind="rss"\} (\d+)/.exec(text)?.[1]);
    expect(heapUsed).toBeGreaterThan(1_000_000);
    expect(rss).toBeGreaterThan(heapUsed);
  });
});
