/**
 * Sizes and limits checked at the door (issue 9, items 7 and 8): an env the kernel cannot pass to
 * an exec, limits that round to "unlimited", and the configured default limits that apply when a
 * spec names none. Through the HTTP API, with an in-memory provider.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { SandboxSpecSchema } from '../../core/schemas/sandbox.ts';
import { parseOrThrow } from '../../core/validate.ts';
import type { DaemonConfigInput } from '../../daemon/config.ts';
import type { ProviderContext } from '../../providers/sandbox-provider.ts';
import { startTestDaemon, type TestDaemon } from '../daemon-harness.ts';
import { MemoryProvider } from '../fixtures/memory-provider.ts';

let daemon: TestDaemon | undefined;

async function start(config: Partial<DaemonConfigInput> = {}): Promise<TestDaemon> {
  daemon = await startTestDaemon(
    { providers: [{ name: 'memory' }], ...config },
    { factories: { memory: (_options: unknown, context: ProviderContext) => new MemoryProvider(context) } },
  );
  return daemon;
}

afterEach(async () => {
  await daemon?.cleanup();
  daemon = undefined;
});

/** What these tests read of a sandbox or an error body. */
interface ResponseBody {
  id: string;
  fromPool: boolean;
  spec: { resources: Record<string, number> };
  error: { code: string; message: string; details: { issues: Array<{ path: string }> } };
}

async function post(test: TestDaemon, url: string, payload: unknown) {
  const response = await test.app.inject({
    method: 'POST',
    url,
    headers: test.auth,
    payload: payload as object,
  });
  return { status: response.statusCode, body: response.json() as ResponseBody };
}

describe('sizes checked at the door', () => {
  it('refuses an env value over the kernel limit at create, naming the variable', async () => {
    // Seen: created (201), then every exec came back sandbox_gone and the sandbox was dropped.
    const test = await start();
    const response = await post(test, '/v1/sandboxes', {
      image: 'img',
      env: { BIG: 'x'.repeat(200 * 1024) },
    });
    expect(response.status).toBe(400);
    expect(response.body.error.code).toBe('VALIDATION_FAILED');
    expect(response.body.error.message).toContain('env.BIG');
    expect(response.body.error.details.issues[0]?.path).toBe('env.BIG');
  });

  it('refuses an env whose variables together pass the total, and too many of them', async () => {
    const test = await start();
    const wide = Object.fromEntries(
      Array.from({ length: 4 }, (_, index) => [`V${index}`, 'y'.repeat(100 * 1024)]),
    );
    const total = await post(test, '/v1/sandboxes', { image: 'img', env: wide });
    expect(total.status).toBe(400);
    expect(total.body.error.message).toMatch(/env: all variables together must be at most 262144 bytes/);
    const many = Object.fromEntries(Array.from({ length: 1025 }, (_, index) => [`V${index}`, '1']));
    expect((await post(test, '/v1/sandboxes', { image: 'img', env: many })).body.error.message).toMatch(
      /env: must hold at most 1024 variables/,
    );
  });

  it('accepts an env just under the limits', async () => {
    const test = await start();
    const response = await post(test, '/v1/sandboxes', {
      image: 'img',
      env: { A: 'a'.repeat(100 * 1024), B: 'b'.repeat(100 * 1024) },
    });
    expect(response.status, JSON.stringify(response.body).slice(0, 300)).toBe(201);
  });

  it('refuses too many labels, and an exec env or argument the kernel cannot pass', async () => {
    const test = await start();
    const labels = Object.fromEntries(Array.from({ length: 65 }, (_, index) => [`k${index}`, 'v']));
    const refused = await post(test, '/v1/sandboxes', { image: 'img', labels });
    expect(refused.status).toBe(400);
    expect(refused.body.error.message).toMatch(/labels: must hold at most 64 labels/);
    const { id } = (await post(test, '/v1/sandboxes', { image: 'img' })).body;
    const execEnv = await post(test, `/v1/sandboxes/${id}/exec`, {
      argv: ['true'],
      env: { HUGE: 'z'.repeat(130 * 1024) },
    });
    expect(execEnv.status).toBe(400);
    expect(execEnv.body.error.message).toContain('env.HUGE');
    const argument = await post(test, `/v1/sandboxes/${id}/exec`, { argv: ['echo', 'z'.repeat(130 * 1024)] });
    expect(argument.status).toBe(400);
    expect(argument.body.error.message).toContain('argv.1');
  });

  it('refuses a pool acquire whose env passes the limits', async () => {
    const test = await start();
    const defined = await test.app.inject({
      method: 'PUT',
      url: '/v1/pools/small',
      headers: test.auth,
      payload: { spec: { image: 'img' }, minIdle: 0 },
    });
    expect(defined.statusCode, defined.body).toBeLessThan(300);
    const response = await post(test, '/v1/sandboxes', {
      pool: 'small',
      env: { BIG: 'x'.repeat(200 * 1024) },
    });
    expect(response.status).toBe(400);
    expect(response.body.error.message).toContain('env.BIG');
  });
});

describe('resource limits by default', () => {
  it('gives a spec without resources the configured limits, and shows them in the spec', async () => {
    const test = await start({ defaults: { resources: { cpus: 1.5, memoryMiB: 2048, pidsLimit: 300 } } });
    const created = await post(test, '/v1/sandboxes', { image: 'img' });
    expect(created.status).toBe(201);
    expect(created.body.spec.resources).toMatchObject({ cpus: 1.5, memoryMiB: 2048, pidsLimit: 300 });
    const partial = await post(test, '/v1/sandboxes', { image: 'img', resources: { memoryMiB: 512 } });
    expect(partial.body.spec.resources).toMatchObject({ cpus: 1.5, memoryMiB: 512, pidsLimit: 300 });
  });

  it('applies the built-in defaults when the config names none', async () => {
    const test = await start();
    const created = await post(test, '/v1/sandboxes', { image: 'img' });
    expect(created.body.spec.resources).toMatchObject({ cpus: 2, memoryMiB: 4096, pidsLimit: 1024 });
  });

  it('gives pool members the configured limits', async () => {
    const test = await start({ defaults: { resources: { cpus: 1, memoryMiB: 1000, pidsLimit: 100 } } });
    await test.app.inject({
      method: 'PUT',
      url: '/v1/pools/limited',
      headers: test.auth,
      payload: { spec: { image: 'img' }, minIdle: 1 },
    });
    const deadline = Date.now() + 5000;
    let acquired = await post(test, '/v1/sandboxes', { pool: 'limited' });
    while (!acquired.body.fromPool && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      acquired = await post(test, '/v1/sandboxes', { pool: 'limited' });
    }
    expect(acquired.status).toBe(201);
    expect(acquired.body.spec.resources).toMatchObject({ cpus: 1, memoryMiB: 1000, pidsLimit: 100 });
  });

  it('refuses limits that round to "unlimited" or cannot run a shell', async () => {
    const test = await start();
    const tiny = await post(test, '/v1/sandboxes', { image: 'img', resources: { cpus: 1e-10 } });
    expect(tiny.status).toBe(400);
    expect(tiny.body.error.message).toContain('resources.cpus');
    const pids = await post(test, '/v1/sandboxes', { image: 'img', resources: { pidsLimit: 2 } });
    expect(pids.status).toBe(400);
    expect(pids.body.error.message).toContain('resources.pidsLimit');
  });

  it('allows a larger explicit value within maxResources and refuses one beyond it, naming the setting', async () => {
    const test = await start({ maxResources: { memoryMiB: 8192, cpus: 4 } });
    const larger = await post(test, '/v1/sandboxes', {
      image: 'img',
      resources: { memoryMiB: 8192, cpus: 4 },
    });
    expect(larger.status).toBe(201);
    expect(larger.body.spec.resources).toMatchObject({ memoryMiB: 8192, cpus: 4, pidsLimit: 1024 });
    const beyond = await post(test, '/v1/sandboxes', { image: 'img', resources: { memoryMiB: 16384 } });
    expect(beyond.status).toBe(400);
    expect(beyond.body.error.message).toContain('maxResources.memoryMiB');
  });
});

describe('readiness probes are bounded like exec requests', () => {
  it('refuses a probe argument over the kernel limit of one argument, naming it', () => {
    expect(() =>
      parseOrThrow(
        SandboxSpecSchema,
        { image: 'img', readiness: { argv: ['sh', 'x'.repeat(200 * 1024)] } },
        'spec',
      ),
    ).toThrow(/readiness\.argv\.1/);
  });
});
