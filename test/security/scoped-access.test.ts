/**
 * Issue 36, "lend a sandbox, not the daemon": a scoped credential does exactly its rights on its
 * sandboxes and nothing else, on every route the API registers (a route added later is refused
 * unless this table says otherwise), and dies with its expiry, its revocation or its sandbox.
 * Judged by what its holder achieves: statuses, and the daemon's state after the sweep.
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import type { Clock } from '../../core/clock.ts';
import type { Logger } from '../../core/logger.ts';
import { loadConfig } from '../../daemon/config.ts';
import { startDaemon } from '../../daemon/daemon.ts';
import { ProviderRegistry } from '../../providers/registry.ts';
import type { ProviderContext } from '../../providers/sandbox-provider.ts';
import { startTestDaemon, type TestDaemon } from '../daemon-harness.ts';
import { MemoryProvider } from '../fixtures/memory-provider.ts';
import { waitFor } from '../wait-for.ts';

class MovableClock implements Clock {
  offsetMs = 0;
  now() {
    return Date.now() + this.offsetMs;
  }
  monotonicMs() {
    return performance.now() + this.offsetMs;
  }
}

/**
 * What a scoped credential may call, on a sandbox it names, and the right it takes (`inspect`:
 * any grant). Everything else the server registers must refuse it.
 */
const SCOPED_ROUTES: Record<string, 'inspect' | 'exec' | 'files' | 'endpoints' | 'pty'> = {
  'GET /v1/sandboxes/:id': 'inspect',
  'HEAD /v1/sandboxes/:id': 'inspect',
  'POST /v1/sandboxes/:id/exec': 'exec',
  'POST /v1/sandboxes/:id/stop-processes': 'exec',
  'POST /v1/sandboxes/:id/toolchain-check': 'exec',
  'PUT /v1/sandboxes/:id/files': 'files',
  'GET /v1/sandboxes/:id/files': 'files',
  'HEAD /v1/sandboxes/:id/files': 'files',
  'PUT /v1/sandboxes/:id/archive': 'files',
  'GET /v1/sandboxes/:id/archive': 'files',
  'HEAD /v1/sandboxes/:id/archive': 'files',
  'POST /v1/sandboxes/:id/gateway': 'endpoints',
  'GET /v1/sandboxes/:id/ports/:port': 'endpoints',
  'HEAD /v1/sandboxes/:id/ports/:port': 'endpoints',
  'POST /v1/sandboxes/:id/ptys': 'pty',
  'GET /v1/sandboxes/:id/ptys': 'pty',
  'HEAD /v1/sandboxes/:id/ptys': 'pty',
  'GET /v1/sandboxes/:id/ptys/:ptyId': 'pty',
  'HEAD /v1/sandboxes/:id/ptys/:ptyId': 'pty',
  'DELETE /v1/sandboxes/:id/ptys/:ptyId': 'pty',
  'POST /v1/sandboxes/:id/ptys/:ptyId/attach': 'pty',
  'DELETE /v1/sandboxes/:id/ptys/:ptyId/attach': 'pty',
  'GET /v1/sandboxes/:id/ptys/:ptyId/output': 'pty',
  'HEAD /v1/sandboxes/:id/ptys/:ptyId/output': 'pty',
  'POST /v1/sandboxes/:id/ptys/:ptyId/input': 'pty',
  'POST /v1/sandboxes/:id/ptys/:ptyId/resize': 'pty',
  'POST /v1/sandboxes/:id/ptys/:ptyId/signal': 'pty',
};

/** Routes that answer anyone the same whatever the bearer (liveness), or check their own key or cookie. */
const OPEN_ROUTES = new Set(['GET /healthz', 'HEAD /healthz']);

/** Every method and path the server registers, read from fastify's own route tree. */
function registeredRoutes(tree: string): { method: string; path: string }[] {
  const routes: { method: string; path: string }[] = [];
  const stack: string[] = [];
  for (const line of tree.split('\n')) {
    const match = /^((?:[│ ] {3})*)[├└]── (.*?)(?: \(([A-Z, ]+)\))?$/.exec(line);
    if (match === null) continue;
    const depth = match[1]!.length / 4;
    stack.length = depth;
    stack.push(match[2]!);
    const path = stack.join('');
    for (const method of match[3]?.split(', ') ?? []) routes.push({ method, path });
  }
  return routes;
}

let daemon: TestDaemon | undefined;
const directories: string[] = [];
let provider: MemoryProvider | undefined;

afterEach(async () => {
  await daemon?.cleanup();
  daemon = undefined;
  provider = undefined;
  for (const directory of directories.splice(0)) await rm(directory, { recursive: true, force: true });
});

async function start(options: { clock?: Clock; stateDir?: string } = {}): Promise<TestDaemon> {
  daemon = await startTestDaemon(
    {
      providers: [{ name: 'memory' }],
      ...(options.stateDir === undefined ? {} : { stateDir: options.stateDir }),
    },
    {
      factories: {
        // One backend across restarts of the daemon, as a real engine outlives it.
        memory: (_options: unknown, context: ProviderContext) => {
          provider ??= new MemoryProvider(context);
          return provider;
        },
      },
      ...(options.clock === undefined ? {} : { clock: options.clock }),
    },
  );
  return daemon;
}

async function createSandbox(test: TestDaemon, ttlSeconds = 600): Promise<string> {
  const response = await test.app.inject({
    method: 'POST',
    url: '/v1/sandboxes',
    headers: test.auth,
    payload: { image: 'img', ttlSeconds },
  });
  expect(response.statusCode, response.body).toBe(201);
  return response.json().id as string;
}

interface Minted {
  id: string;
  token: string;
  expiresAt: string;
  sandboxIds: string[];
}

async function mint(test: TestDaemon, body: Record<string, unknown>): Promise<Minted> {
  const response = await test.app.inject({
    method: 'POST',
    url: '/v1/access',
    headers: test.auth,
    payload: body,
  });
  expect(response.statusCode, response.body).toBe(201);
  return response.json() as Minted;
}

const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

async function inspect(test: TestDaemon, id: string, token: string) {
  return test.app.inject({ method: 'GET', url: `/v1/sandboxes/${id}`, headers: bearer(token) });
}

describe('a scoped credential', () => {
  it('is refused on every registered route but its rights on its own sandbox', async () => {
    const test = await start();
    const own = await createSandbox(test);
    const other = await createSandbox(test);
    const all = await mint(test, { sandboxIds: [own], rights: ['exec', 'files', 'pty', 'endpoints'] });
    const filesOnly = await mint(test, { sandboxIds: [own], rights: ['files'] });
    const unrelated = await mint(test, { sandboxIds: [other], rights: ['exec'] });
    const routes = registeredRoutes(test.app.printRoutes({ commonPrefix: false }));
    // The table above must name real routes: a renamed route would otherwise go untested.
    const keys = new Set(routes.map((route) => `${route.method} ${route.path}`));
    for (const key of Object.keys(SCOPED_ROUTES)) expect(keys, key).toContain(key);
    expect(routes.length).toBeGreaterThan(40);

    const call = (method: string, path: string, id: string, token: string) =>
      test.app.inject({
        method: method as 'GET',
        url: path
          .replaceAll(':id', id)
          .replaceAll(':name', 'pool-a')
          .replaceAll(':rolloutId', 'ro-abcdefgh')
          // fastify's tree prints a wildcard `/*` without its `/`.
          .replace(/(?<!\/)\*$/, '/x')
          .replaceAll('*', 'x'),
        headers: {
          ...bearer(token),
          ...(method === 'GET' || method === 'HEAD' ? {} : { 'content-type': 'application/json' }),
        },
        ...(method === 'GET' || method === 'HEAD' ? {} : { payload: '{}' }),
      });

    for (const { method, path } of routes) {
      const key = `${method} ${path}`;
      const right = SCOPED_ROUTES[key];
      // The route's :id stands for the credential's own sandbox, another sandbox, another grant.
      for (const id of [own, other, unrelated.id]) {
        const response = await call(method, path, id, all.token);
        if (OPEN_ROUTES.has(key)) {
          const anonymous = await test.app.inject({ method: method as 'GET', url: path });
          expect(response.body, key).toBe(anonymous.body);
        } else if (right !== undefined && id === own) {
          expect([401, 403], `${key} on its own sandbox: ${response.body}`).not.toContain(
            response.statusCode,
          );
        } else {
          expect([401, 403], `${key} (${id}): ${response.body}`).toContain(response.statusCode);
        }
      }
      // A right it lacks is refused on its own sandbox too.
      if (right !== undefined && right !== 'inspect' && right !== 'files') {
        const response = await call(method, path, own, filesOnly.token);
        expect(response.statusCode, `${key} without ${right}`).toBe(403);
        // A HEAD answer has no body to name the code.
        if (method !== 'HEAD') expect(response.json().error.code).toBe('ACCESS_DENIED');
      }
    }

    // Nothing the sweep refused ran: both sandboxes live, no pool, no snapshot, the grants all there.
    for (const id of [own, other]) expect((await inspect(test, id, test.token)).statusCode).toBe(200);
    const listed = await test.app.inject({ method: 'GET', url: '/v1/pools', headers: test.auth });
    expect(listed.json().pools).toEqual([]);
    const grants = await test.app.inject({ method: 'GET', url: '/v1/access', headers: test.auth });
    expect(
      grants
        .json()
        .grants.map((grant: { id: string }) => grant.id)
        .sort(),
    ).toEqual([all.id, filesOnly.id, unrelated.id].sort());
  });

  it('cannot mint, widen or list credentials, nor revoke another', async () => {
    const test = await start();
    const id = await createSandbox(test);
    const other = await createSandbox(test);
    const granted = await mint(test, { sandboxIds: [id], rights: ['exec'] });
    const second = await mint(test, { sandboxIds: [other], rights: ['exec'] });
    for (const payload of [
      { sandboxIds: [id], rights: ['exec'] },
      { sandboxIds: [other], rights: ['exec', 'files'] },
    ]) {
      const response = await test.app.inject({
        method: 'POST',
        url: '/v1/access',
        headers: bearer(granted.token),
        payload,
      });
      expect(response.statusCode).toBe(403);
    }
    expect(
      (await test.app.inject({ method: 'GET', url: '/v1/access', headers: bearer(granted.token) }))
        .statusCode,
    ).toBe(403);
    const revokeOther = await test.app.inject({
      method: 'DELETE',
      url: `/v1/access/${second.id}`,
      headers: bearer(granted.token),
    });
    expect(revokeOther.statusCode).toBe(403);
    expect((await inspect(test, other, second.token)).statusCode).toBe(200);
    // No route matched (a spelling that would climb from its sandbox to another): still refused.
    for (const url of [
      `/v1/sandboxes/${id}/../${other}/exec`,
      `/v1/sandboxes/${id}%2F..%2F${other}/exec`,
      `/v1/sandboxes/${other}/exec?id=${id}`,
      '/v1/nowhere',
    ]) {
      const response = await test.app.inject({
        method: 'POST',
        url,
        headers: bearer(granted.token),
        payload: { argv: ['true'] },
      });
      expect(response.statusCode, `${url}: ${response.body}`).toBe(403);
      expect(response.json().error.code, url).not.toBe('VALIDATION_FAILED');
    }
    expect(provider!.execs).toEqual([]);
  });

  it('is not the grant id with a guessed secret, nor anything a sandbox holds', async () => {
    const test = await start();
    const id = await createSandbox(test);
    const granted = await mint(test, { sandboxIds: [id], rights: ['exec'] });
    const secret = granted.token.split('.')[2]!;
    const forged = [
      `gym-access.${granted.id}.${'A'.repeat(43)}`,
      `gym-access.${granted.id}.${secret.slice(0, -1)}${secret.endsWith('A') ? 'B' : 'A'}`,
      `gym-access.${granted.id}.${id}`,
      `gym-access.acc-0000000000000000.${secret}`,
      `gym-access.${granted.id}.${secret}.`,
      `gym-access.${id}.${secret}`,
    ];
    for (const token of forged) {
      const response = await inspect(test, id, token);
      expect(response.statusCode, token).toBe(401);
    }
    expect((await inspect(test, id, granted.token)).statusCode).toBe(200);
  });

  it('expires, never past the lease it was minted under', async () => {
    const clock = new MovableClock();
    const test = await start({ clock });
    const id = await createSandbox(test, 600);
    const lease = (
      await test.app.inject({ method: 'GET', url: `/v1/sandboxes/${id}`, headers: test.auth })
    ).json().leaseExpiresAt as string;
    const capped = await mint(test, { sandboxIds: [id], rights: ['exec'], ttlSeconds: 86_400 });
    expect(capped.expiresAt).toBe(lease);
    const short = await mint(test, { sandboxIds: [id], rights: ['exec'], ttlSeconds: 60 });
    expect((await inspect(test, id, short.token)).statusCode).toBe(200);
    // The owner renews the lease; the credential does not grow with it.
    await test.app.inject({
      method: 'POST',
      url: `/v1/sandboxes/${id}/keepalive`,
      headers: test.auth,
      payload: { ttlSeconds: 3600 },
    });
    clock.offsetMs = 61_000;
    const expired = await inspect(test, id, short.token);
    expect(expired.statusCode).toBe(401);
    expect(expired.json().error.code).toBe('UNAUTHORIZED');
    expect((await inspect(test, id, capped.token)).statusCode).toBe(200);
    clock.offsetMs = 601_000;
    expect((await inspect(test, id, capped.token)).statusCode).toBe(401);
  });

  it('dies with its revocation, by the token holder or by itself', async () => {
    const test = await start();
    const id = await createSandbox(test);
    const first = await mint(test, { sandboxIds: [id], rights: ['exec'] });
    const second = await mint(test, { sandboxIds: [id], rights: ['exec'] });
    const byOwner = await test.app.inject({
      method: 'DELETE',
      url: `/v1/access/${first.id}`,
      headers: test.auth,
    });
    expect(byOwner.statusCode).toBe(204);
    expect((await inspect(test, id, first.token)).statusCode).toBe(401);
    const bySelf = await test.app.inject({
      method: 'DELETE',
      url: `/v1/access/${second.id}`,
      headers: bearer(second.token),
    });
    expect(bySelf.statusCode).toBe(204);
    expect((await inspect(test, id, second.token)).statusCode).toBe(401);
    const again = await test.app.inject({
      method: 'DELETE',
      url: `/v1/access/${second.id}`,
      headers: test.auth,
    });
    expect(again.statusCode).toBe(204);
    expect((await inspect(test, id, test.token)).statusCode).toBe(200);
  });

  it('dies with its sandbox; a grant of two keeps the one still live', async () => {
    const test = await start();
    const [first, second] = [await createSandbox(test), await createSandbox(test)];
    const pair = await mint(test, { sandboxIds: [first, second], rights: ['exec'] });
    const single = await mint(test, { sandboxIds: [first], rights: ['exec'] });
    await test.app.inject({ method: 'DELETE', url: `/v1/sandboxes/${first}`, headers: test.auth });
    expect((await inspect(test, first, single.token)).statusCode).toBe(401);
    expect((await inspect(test, first, pair.token)).statusCode).toBe(403);
    expect((await inspect(test, second, pair.token)).statusCode).toBe(200);
    const grants = await test.app.inject({ method: 'GET', url: '/v1/access', headers: test.auth });
    expect(grants.json().grants).toEqual([expect.objectContaining({ id: pair.id, sandboxIds: [second] })]);
  });

  it('is minted only for ready sandboxes it can name', async () => {
    const test = await start();
    const id = await createSandbox(test);
    for (const [payload, status] of [
      [{ sandboxIds: ['sbx-doesnotexist0'], rights: ['exec'] }, 404],
      [{ sandboxIds: [id], rights: [] }, 400],
      [{ sandboxIds: [id], rights: ['destroy'] }, 400],
      [{ sandboxIds: [id, id], rights: ['exec'] }, 400],
      [{ sandboxIds: [id], rights: ['exec'], ttlSeconds: 0 }, 400],
      [{ sandboxIds: [id], rights: ['exec'], scope: 'admin' }, 400],
    ] as const) {
      const response = await test.app.inject({
        method: 'POST',
        url: '/v1/access',
        headers: test.auth,
        payload,
      });
      expect(response.statusCode, JSON.stringify(payload)).toBe(status);
    }
  });

  it("is not minted for a pool's idle member, and dies when a lent member goes back", async () => {
    const test = await start();
    await test.pools.define('warm', { spec: { image: 'img' }, minIdle: 1 });
    await waitFor('the pool to fill', () => test.pools.stats('warm').idle === 1, 5_000, 20);
    const [idle] = test.manager.lifecycle.poolRecords('warm').filter((record) => record.poolState === 'idle');
    const refused = await test.app.inject({
      method: 'POST',
      url: '/v1/access',
      headers: test.auth,
      payload: { sandboxIds: [idle!.id], rights: ['exec'] },
    });
    expect([404, 409], refused.body).toContain(refused.statusCode);
    const acquired = await test.app.inject({
      method: 'POST',
      url: '/v1/sandboxes',
      headers: test.auth,
      payload: { pool: 'warm' },
    });
    const id = acquired.json().id as string;
    const lent = await mint(test, { sandboxIds: [id], rights: ['exec'] });
    expect((await inspect(test, id, lent.token)).statusCode).toBe(200);
    await test.app.inject({ method: 'DELETE', url: `/v1/sandboxes/${id}`, headers: test.auth });
    expect((await inspect(test, id, lent.token)).statusCode).toBe(401);
  });

  it('survives a restart while its sandbox does, and the state directory holds no credential', async () => {
    const stateDir = await mkdtemp(join(tmpdir(), 'gym-scoped-'));
    directories.push(stateDir);
    let test = await start({ stateDir });
    const kept = await createSandbox(test);
    const lost = await createSandbox(test);
    const keptGrant = await mint(test, { sandboxIds: [kept], rights: ['exec'] });
    const lostGrant = await mint(test, { sandboxIds: [lost], rights: ['exec'] });
    const file = await readFile(join(stateDir, 'access-grants.json'), 'utf8');
    for (const token of [keptGrant.token, lostGrant.token]) expect(file).not.toContain(token.split('.')[2]);
    await test.cleanup();
    daemon = undefined;
    // While the daemon was down, the engine lost one sandbox.
    await provider!.destroy(lost);
    test = await start({ stateDir });
    expect((await inspect(test, kept, keptGrant.token)).statusCode).toBe(200);
    expect((await inspect(test, lost, lostGrant.token)).statusCode).toBe(401);
  });

  it('is forgotten when its grants file is damaged, refusing it rather than admitting one', async () => {
    const stateDir = await mkdtemp(join(tmpdir(), 'gym-scoped-'));
    directories.push(stateDir);
    let test = await start({ stateDir });
    const id = await createSandbox(test);
    const granted = await mint(test, { sandboxIds: [id], rights: ['exec'] });
    await test.cleanup();
    daemon = undefined;
    const { writeFile } = await import('node:fs/promises');
    await writeFile(join(stateDir, 'access-grants.json'), '{"version":1,"grants":[{"id":');
    test = await start({ stateDir });
    expect((await inspect(test, id, granted.token)).statusCode).toBe(401);
    expect((await inspect(test, id, test.token)).statusCode).toBe(200);
  });

  it('never reaches the log, at any level, minted, used, refused or revoked', async () => {
    const stateDir = await mkdtemp(join(tmpdir(), 'gym-scoped-'));
    directories.push(stateDir);
    const lines: string[] = [];
    const sink = new Writable({
      write(chunk, _encoding, done) {
        lines.push(String(chunk));
        done();
      },
    });
    const registry = new ProviderRegistry();
    registry.register('memory', (_options: unknown, context: ProviderContext) => new MemoryProvider(context));
    const config = await loadConfig({ env: {}, overrides: [{ stateDir, providers: [{ name: 'memory' }] }] });
    const logger = pino({ level: 'trace' }, sink) as unknown as Logger & ReturnType<typeof pino>;
    const running = await startDaemon({ config, logger, registry, listen: false });
    try {
      const auth = { authorization: `Bearer ${running.token}` };
      const created = await running.app.inject({
        method: 'POST',
        url: '/v1/sandboxes',
        headers: auth,
        payload: { image: 'img' },
      });
      const id = created.json().id as string;
      const minted = await running.app.inject({
        method: 'POST',
        url: '/v1/access',
        headers: auth,
        payload: { sandboxIds: [id], rights: ['exec'] },
      });
      const granted = minted.json() as Minted;
      const secret = granted.token.split('.')[2]!;
      await running.app.inject({
        method: 'POST',
        url: `/v1/sandboxes/${id}/exec`,
        headers: bearer(granted.token),
        payload: { argv: ['true'] },
      });
      await running.app.inject({
        method: 'DELETE',
        url: `/v1/sandboxes/${id}`,
        headers: bearer(granted.token),
      });
      await running.app.inject({ method: 'GET', url: '/v1/access', headers: bearer(granted.token) });
      await running.app.inject({
        method: 'DELETE',
        url: `/v1/access/${granted.id}`,
        headers: bearer(granted.token),
      });
      await running.app.inject({ method: 'GET', url: `/v1/sandboxes/${id}`, headers: bearer(granted.token) });
      const log = lines.join('');
      // The log was written (the grant is named by its id), and holds no secret.
      expect(log).toContain(granted.id);
      expect(log).not.toContain(secret);
    } finally {
      await running.stop();
    }
  });
});
