import { afterEach, describe, expect, it } from 'vitest';
import type { ProviderCapabilities, ProviderContext } from '../providers/sandbox-provider.ts';
import { startTestDaemon, type TestDaemon } from '../test/daemon-harness.ts';
import { MemoryProvider } from '../test/fixtures/memory-provider.ts';

/** A provider with only the required operations: no sessions, snapshot, process stop, gpus or disk limit. */
const MINIMAL: Partial<ProviderCapabilities> = { sessions: false, snapshot: false, stopProcesses: false };

let daemon: TestDaemon | undefined;
let provider: MemoryProvider;

afterEach(async () => {
  await daemon?.cleanup();
  daemon = undefined;
});

async function start(capabilities: Partial<ProviderCapabilities> = MINIMAL): Promise<TestDaemon> {
  daemon = await startTestDaemon(
    { providers: [{ name: 'memory' }] },
    {
      factories: {
        memory: (_options: unknown, context: ProviderContext) => {
          provider = new MemoryProvider(context, { capabilities });
          return provider;
        },
      },
    },
  );
  return daemon;
}

async function post(test: TestDaemon, url: string, payload: Record<string, unknown>) {
  return test.app.inject({ method: 'POST', url, headers: test.auth, payload });
}

async function createSandbox(test: TestDaemon): Promise<string> {
  const response = await post(test, '/v1/sandboxes', { image: 'img' });
  expect(response.statusCode, response.body).toBe(201);
  return response.json().id as string;
}

describe('sessions are a hint', () => {
  it('runs a session command one-shot on a provider without sessions, and says so', async () => {
    const test = await start();
    const id = await createSandbox(test);
    const response = await post(test, `/v1/sandboxes/${id}/exec`, { argv: ['echo', 'hi'], session: 'agent' });
    expect(response.statusCode, response.body).toBe(200);
    expect(response.json()).toMatchObject({ status: 'ok', exitCode: 0, stdout: 'echo hi\n', session: false });
    expect(provider.execs.at(-1)).not.toHaveProperty('session');
    // A one-shot request is not a fallback: nothing to say.
    const oneShot = await post(test, `/v1/sandboxes/${id}/exec`, { argv: ['true'] });
    expect(oneShot.json()).not.toHaveProperty('session');
  });

  it('falls back the same way for a streamed exec', async () => {
    const test = await start();
    const id = await createSandbox(test);
    const response = await post(test, `/v1/sandboxes/${id}/exec?stream=ndjson`, {
      argv: ['echo', 'streamed'],
      session: 'agent',
    });
    expect(response.statusCode, response.body).toBe(200);
    expect(response.body.trim().split('\n').at(-1)).toContain('"session":false');
  });

  it('runs a session command in its session where the provider has sessions', async () => {
    const test = await start({ sessions: true });
    const id = await createSandbox(test);
    const response = await post(test, `/v1/sandboxes/${id}/exec`, { argv: ['true'], session: 'agent' });
    expect(response.json()).not.toHaveProperty('session');
    expect(provider.execs.at(-1)).toMatchObject({ session: 'agent' });
  });
});

describe('capability checks', () => {
  it.each([
    [{ resources: { gpus: 1 } }, 'gpus'],
    [{ resources: { diskMiB: 100 } }, 'diskLimit'],
    [{ network: 'bridge' }, 'networkModes'],
  ])(
    'refuses a create asking %j, naming the provider and %s, and creates nothing',
    async (ask, capability) => {
      const test = await start();
      const response = await post(test, '/v1/sandboxes', { image: 'img', ...ask });
      expect(response.statusCode, response.body).toBe(501);
      expect(response.json().error).toMatchObject({
        code: 'CAPABILITY_UNSUPPORTED',
        details: { provider: 'memory', capability },
      });
      expect(response.json().error.message).toContain('memory');
      expect(provider.sandboxes.size).toBe(0);
    },
  );

  it('names the network mode asked for and those the provider has', async () => {
    const test = await start({ networkModes: ['none', 'bridge'] });
    const response = await post(test, '/v1/sandboxes', { image: 'img', network: 'host' });
    expect(response.json().error).toMatchObject({
      code: 'CAPABILITY_UNSUPPORTED',
      details: { network: 'host', available: ['none', 'bridge'] },
    });
    expect(response.json().error.message).toContain('"host"');
    expect((await post(test, '/v1/sandboxes', { image: 'img', network: 'bridge' })).statusCode).toBe(201);
  });

  it('refuses a pool whose sandboxes the provider cannot make', async () => {
    const test = await start();
    const response = await test.app.inject({
      method: 'PUT',
      url: '/v1/pools/gpu',
      headers: test.auth,
      payload: { spec: { image: 'img', resources: { gpus: 2 } }, minIdle: 1 },
    });
    expect(response.statusCode, response.body).toBe(501);
    expect(response.json().error).toMatchObject({
      code: 'CAPABILITY_UNSUPPORTED',
      details: { provider: 'memory', capability: 'gpus' },
    });
  });

  it.each([
    ['snapshot', { image: 'gym-snapshot/x:1' }, 'snapshot'],
    ['stop-processes', {}, 'stopProcesses'],
  ])('refuses %s on a provider without it', async (route, payload, capability) => {
    const test = await start();
    const id = await createSandbox(test);
    const response = await post(test, `/v1/sandboxes/${id}/${route}`, payload);
    expect(response.statusCode, response.body).toBe(501);
    expect(response.json().error).toMatchObject({
      code: 'CAPABILITY_UNSUPPORTED',
      details: { provider: 'memory', capability },
    });
  });
});
