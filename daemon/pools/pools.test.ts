import { afterEach, describe, expect, it } from 'vitest';
import type { ProviderContext } from '../../providers/sandbox-provider.ts';
import { startTestDaemon, type TestDaemon } from '../../test/daemon-harness.ts';
import { MemoryProvider } from '../../test/fixtures/memory-provider.ts';
import { waitFor } from '../../test/wait-for.ts';

/** In-memory pools fill in milliseconds: a short deadline, a tight poll. */
const waitForPool = (what: string, condition: () => boolean) => waitFor(what, condition, 5_000, 20);

let daemon: TestDaemon | undefined;
let provider: MemoryProvider;

afterEach(async () => {
  await daemon?.cleanup();
  daemon = undefined;
});

async function start(limits: Record<string, number> = {}): Promise<TestDaemon> {
  daemon = await startTestDaemon(
    { providers: [{ name: 'memory', ...limits }] },
    {
      factories: {
        memory: (_options: unknown, context: ProviderContext) => {
          provider = new MemoryProvider(context);
          return provider;
        },
      },
    },
  );
  return daemon;
}

describe('pools (in-memory provider)', () => {
  it('fills to minIdle, hands out warm sandboxes, falls back to cold ones, and refills', async () => {
    const test = await start();
    const put = await test.app.inject({
      method: 'PUT',
      url: '/v1/pools/warm',
      headers: test.auth,
      payload: { spec: { image: 'img' }, minIdle: 2 },
    });
    expect(put.statusCode, put.body).toBe(201);
    await waitForPool('the pool to fill', () => test.pools.stats('warm').idle === 2);
    // Idle members are the pool's: not listed, not reachable by id.
    expect(
      (await test.app.inject({ method: 'GET', url: '/v1/sandboxes', headers: test.auth })).json().sandboxes,
    ).toEqual([]);

    const acquire = () =>
      test.app.inject({
        method: 'POST',
        url: '/v1/sandboxes',
        headers: test.auth,
        payload: { pool: 'warm' },
      });
    const outcomes = await Promise.all([acquire(), acquire(), acquire()]);
    expect(outcomes.map((response) => response.statusCode)).toEqual([201, 201, 201]);
    expect(outcomes.map((response) => response.json().fromPool).sort()).toEqual([false, true, true]);
    expect(new Set(outcomes.map((response) => response.json().id)).size).toBe(3);
    expect(outcomes.every((response) => response.json().pool === 'warm')).toBe(true);

    await waitForPool('the pool to refill', () => test.pools.stats('warm').idle === 2);
    const stats = (
      await test.app.inject({ method: 'GET', url: '/v1/pools/warm', headers: test.auth })
    ).json();
    expect(stats).toMatchObject({ name: 'warm', idle: 2, leased: 3, hits: 2, misses: 1, failures: 0 });
    expect(stats.acquireLatencyMs.count).toBe(3);
  });

  it('applies per-acquire env, labels and TTL, and refuses fields fixed at creation', async () => {
    const test = await start();
    await test.pools.define('fixed', { spec: { image: 'img', env: { BASE: '1' } }, minIdle: 1 });
    await waitForPool('the pool to fill', () => test.pools.stats('fixed').idle === 1);
    const acquired = await test.app.inject({
      method: 'POST',
      url: '/v1/sandboxes',
      headers: test.auth,
      payload: { pool: 'fixed', image: 'img', labels: { task: 't7' }, ttlSeconds: 120, env: { TASK: 't7' } },
    });
    expect(acquired.statusCode, acquired.body).toBe(201);
    expect(acquired.json()).toMatchObject({
      fromPool: true,
      labels: { task: 't7' },
      spec: { ttlSeconds: 120 },
    });
    const listed = await test.app.inject({
      method: 'GET',
      url: '/v1/sandboxes?label=task=t7',
      headers: test.auth,
    });
    expect(listed.json().sandboxes).toHaveLength(1);

    const differs = await test.app.inject({
      method: 'POST',
      url: '/v1/sandboxes',
      headers: test.auth,
      payload: { pool: 'fixed', image: 'other' },
    });
    expect(differs.statusCode).toBe(400);
    expect(differs.json().error.message).toContain('image: differs from pool "fixed"');
    const badEnv = await test.app.inject({
      method: 'POST',
      url: '/v1/sandboxes',
      headers: test.auth,
      payload: { pool: 'fixed', env: { 'bad-name': 'x' } },
    });
    expect(badEnv.statusCode).toBe(400);
    const unknown = await test.app.inject({
      method: 'POST',
      url: '/v1/sandboxes',
      headers: test.auth,
      payload: { pool: 'nope' },
    });
    expect(unknown.statusCode).toBe(404);
    expect(unknown.json().error).toMatchObject({ code: 'POOL_NOT_FOUND', details: { available: ['fixed'] } });
  });

  it('validates definitions, naming the field', async () => {
    const test = await start();
    const inverted = await test.app.inject({
      method: 'PUT',
      url: '/v1/pools/bad',
      headers: test.auth,
      payload: { spec: { image: 'img' }, minIdle: 5, maxIdle: 2 },
    });
    expect(inverted.statusCode).toBe(400);
    expect(inverted.json().error.message).toContain('minIdle');
    const badName = await test.app.inject({
      method: 'PUT',
      url: '/v1/pools/Bad_Name',
      headers: test.auth,
      payload: { spec: { image: 'img' } },
    });
    expect(badName.statusCode).toBe(400);
  });

  it('never lets refill pass maxTotal, and drains idle members on delete', async () => {
    const test = await start();
    await test.pools.define('capped', { spec: { image: 'img' }, minIdle: 3, maxIdle: 3, maxTotal: 4 });
    await waitForPool('the pool to fill', () => test.pools.stats('capped').idle === 3);
    for (let index = 0; index < 3; index += 1) {
      await test.app.inject({
        method: 'POST',
        url: '/v1/sandboxes',
        headers: test.auth,
        payload: { pool: 'capped' },
      });
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
    const stats = test.pools.stats('capped');
    expect(stats.idle + stats.leased + stats.creating).toBeLessThanOrEqual(4);
    expect(stats.leased).toBe(3);
    expect(stats.idle).toBe(1);

    expect(
      (await test.app.inject({ method: 'DELETE', url: '/v1/pools/capped', headers: test.auth })).statusCode,
    ).toBe(204);
    expect(
      (await test.app.inject({ method: 'DELETE', url: '/v1/pools/capped', headers: test.auth })).statusCode,
    ).toBe(204);
    // The leased three remain; the idle one is gone from the provider.
    expect(provider.sandboxes.size).toBe(3);
    expect(
      (await test.app.inject({ method: 'GET', url: '/v1/pools', headers: test.auth })).json().pools,
    ).toEqual([]);
  });

  it('refills after a release, and counts pool gauges in /metrics', async () => {
    const test = await start();
    await test.pools.define('cycle', { spec: { image: 'img' }, minIdle: 1 });
    await waitForPool('the pool to fill', () => test.pools.stats('cycle').idle === 1);
    const sandbox = (
      await test.app.inject({
        method: 'POST',
        url: '/v1/sandboxes',
        headers: test.auth,
        payload: { pool: 'cycle' },
      })
    ).json();
    await test.app.inject({ method: 'DELETE', url: `/v1/sandboxes/${sandbox.id}`, headers: test.auth });
    expect(provider.sandboxes.has(sandbox.id)).toBe(false);
    await waitForPool(
      'the pool to refill',
      () => test.pools.stats('cycle').idle === 1 && test.pools.stats('cycle').leased === 0,
    );
    const text = (await test.app.inject({ method: 'GET', url: '/metrics', headers: test.auth })).body;
    expect(text).toContain('gym_pool_sandboxes{pool="cycle",state="idle"} 1');
    expect(text).toMatch(/gym_pool_acquire_seconds_count\{pool="cycle",outcome="hit"\} 1/);
  });

  it('leaves room for requests: refill never takes the last create slot', async () => {
    const test = await start({ maxLiveSandboxes: 3 });
    await test.pools.define('greedy', { spec: { image: 'img' }, minIdle: 5, maxIdle: 5, maxTotal: 10 });
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(test.pools.stats('greedy').idle).toBe(2);
    const plain = await test.app.inject({
      method: 'POST',
      url: '/v1/sandboxes',
      headers: test.auth,
      payload: { image: 'img' },
    });
    expect(plain.statusCode, plain.body).toBe(201);
  });
});
