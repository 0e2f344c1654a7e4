/**
 * Gateway reach as the daemon drives it: the capability check, the URL recorded with the
 * sandbox, and its restoration for adopted sandboxes when a daemon restarts on the same state.
 * (The real mechanism is tested on Docker: the contract's gateway cases and
 * test/security/gateway-relay.int.test.ts.)
 */
import { mkdir, mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { GymError } from '../core/errors.ts';
import type { SandboxSpec } from '../core/schemas/sandbox.ts';
import type { CreateOptions, ProviderContext } from '../providers/sandbox-provider.ts';
import { startTestDaemon, type TestDaemon } from '../test/daemon-harness.ts';
import { MemoryProvider } from '../test/fixtures/memory-provider.ts';
import type { DaemonConfigInput } from './config.ts';

/** A memory provider with gateway reach: a port per sandbox, forgotten on close as a relay would be. */
class ReachableProvider extends MemoryProvider {
  readonly calls: Array<{ id: string; socketPath: string; url?: string }> = [];
  readonly #ports = new Map<string, number>();
  #nextPort = 40_000;

  constructor(context: ProviderContext) {
    super(context, { capabilities: { gatewayReach: true } });
  }

  async exposeGateway(id: string, options: { socketPath: string; url?: string }): Promise<{ url: string }> {
    this.calls.push({ id, ...options });
    if (!this.sandboxes.has(id)) throw new GymError('SANDBOX_NOT_FOUND', `no sandbox ${id}`);
    const port =
      this.#ports.get(id) ??
      (options.url === undefined ? this.#nextPort++ : Number(new URL(options.url).port));
    this.#ports.set(id, port);
    return { url: `http://127.0.0.1:${port}` };
  }

  override async close(): Promise<void> {
    this.#ports.clear();
  }
}

/** The first line of what a gateway socket answers a plain request with. */
function answerOn(socketPath: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect({ path: socketPath });
    let answer = '';
    socket.on('data', (chunk: Buffer) => {
      answer += chunk.toString('latin1');
    });
    socket.on('error', reject);
    socket.on('close', () => resolve(answer.split('\r\n')[0] ?? ''));
    socket.write('GET /nothing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
  });
}

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** A listening daemon (it serves a gateway socket) on `stateDir`, whose provider is `provider`. */
async function start(
  stateDir: string,
  provider: (context: ProviderContext) => MemoryProvider,
  config: Partial<DaemonConfigInput> = {},
) {
  const daemon = await startTestDaemon(
    { stateDir, providers: [{ name: 'memory' }], ...config },
    { listen: true, factories: { memory: (_options, context) => provider(context) } },
  );
  let isStopped = false;
  const stop = async () => {
    if (isStopped) return;
    isStopped = true;
    await daemon.stop();
  };
  cleanups.push(stop);
  return { daemon, stop };
}

async function stateDirectory(): Promise<string> {
  const directory = await mkdtemp(join(tmpdir(), 'gym-gateway-reach-'));
  cleanups.push(() => rm(directory, { recursive: true, force: true }));
  return directory;
}

async function post(daemon: TestDaemon, url: string, payload: Record<string, unknown> = {}) {
  return daemon.app.inject({ method: 'POST', url, headers: daemon.auth, payload });
}

describe('gateway reach', () => {
  it('is refused with CAPABILITY_UNSUPPORTED, naming gatewayReach, on a provider without it', async () => {
    const { daemon } = await start(await stateDirectory(), (context) => new MemoryProvider(context));
    const id = (await post(daemon, '/v1/sandboxes', { image: 'img' })).json().id as string;
    const response = await post(daemon, `/v1/sandboxes/${id}/gateway`);
    expect(response.statusCode).toBe(501);
    expect(response.json().error).toMatchObject({
      code: 'CAPABILITY_UNSUPPORTED',
      details: { provider: 'memory', capability: 'gatewayReach' },
    });
  });

  it('refuses an egress policy on a provider without it before a sandbox is made, and at PUT', async () => {
    let creates = 0;
    class Counting extends MemoryProvider {
      override create(spec: SandboxSpec, options?: CreateOptions) {
        creates += 1;
        return super.create(spec, options);
      }
    }
    const { daemon } = await start(await stateDirectory(), (context) => new Counting(context), {
      egress: { allowedHosts: ['*.test'] },
    });
    const policy = { mode: 'allowlist', allowedHosts: ['pypi.test'] };
    const refused = await post(daemon, '/v1/sandboxes', { image: 'img', network: policy });
    expect(refused.statusCode).toBe(501);
    expect(refused.json().error).toMatchObject({
      code: 'CAPABILITY_UNSUPPORTED',
      message: expect.stringContaining('egress policy'),
      details: { provider: 'memory', capability: 'gatewayReach' },
    });
    expect(creates).toBe(0);
    // `none` needs no reach; a PUT that opens something is refused the same way, the policy kept.
    const id = (await post(daemon, '/v1/sandboxes', { image: 'img', network: { mode: 'none' } })).json()
      .id as string;
    const put = await daemon.app.inject({
      method: 'PUT',
      url: `/v1/sandboxes/${id}/network`,
      headers: daemon.auth,
      payload: policy,
    });
    expect(put.statusCode).toBe(501);
    expect(put.json().error.message).toContain('egress policy');
    const view = await daemon.app.inject({ url: `/v1/sandboxes/${id}/network`, headers: daemon.auth });
    expect(view.json()).toEqual({ policy: { mode: 'none', allowedHosts: [] }, proxy: null });
  });

  it("answers the provider's URL, the same every time, and hands the provider the sandbox's own gateway socket", async () => {
    const stateDir = await stateDirectory();
    let provider!: ReachableProvider;
    const { daemon } = await start(stateDir, (context) => {
      provider = new ReachableProvider(context);
      return provider;
    });
    const id = (await post(daemon, '/v1/sandboxes', { image: 'img' })).json().id as string;
    const first = await post(daemon, `/v1/sandboxes/${id}/gateway`);
    expect(first.statusCode, first.body).toBe(200);
    expect(first.json()).toEqual({ url: 'http://127.0.0.1:40000' });
    expect((await post(daemon, `/v1/sandboxes/${id}/gateway`)).json()).toEqual(first.json());
    // A socket of the sandbox's own (how the egress proxy knows which sandbox asks), serving the gateway.
    const socketPath = join(stateDir, 'gw', `${id}.sock`);
    expect(provider.calls[0]).toEqual({ id, socketPath });
    expect(await answerOn(socketPath)).toMatch(/^HTTP\/1\.1 404/);
    // Asked again, the provider is told the URL the sandbox has, and the same socket.
    expect(provider.calls[1]).toMatchObject({ url: 'http://127.0.0.1:40000', socketPath });
    expect((await post(daemon, '/v1/sandboxes/sbx-nosuchsandbox00/gateway')).statusCode).toBe(404);
    // It goes with the sandbox.
    expect(
      (await daemon.app.inject({ method: 'DELETE', url: `/v1/sandboxes/${id}`, headers: daemon.auth }))
        .statusCode,
    ).toBe(204);
    await expect
      .poll(() =>
        stat(socketPath).then(
          () => 'there',
          () => 'gone',
        ),
      )
      .toBe('gone');
  });

  it('is restored at the recorded URL for the sandboxes a restarted daemon adopts, and only those', async () => {
    const stateDir = await stateDirectory();
    let provider!: ReachableProvider;
    const first = await start(stateDir, (context) => {
      // One provider outlives both daemons, as a backend does; close() drops its relays.
      provider ??= new ReachableProvider(context);
      return provider;
    });
    const create = async () =>
      (await post(first.daemon, '/v1/sandboxes', { image: 'img', ttlSeconds: 600 })).json().id as string;
    const [reachable, other, plain] = [await create(), await create(), await create()];
    await post(first.daemon, `/v1/sandboxes/${other}/gateway`);
    const { url } = (await post(first.daemon, `/v1/sandboxes/${reachable}/gateway`)).json() as {
      url: string;
    };
    await first.stop();
    provider.calls.length = 0;
    // What a killed daemon leaves of a sandbox gone meanwhile: removed at the next start.
    const stale = join(stateDir, 'gw', 'sbx-gonemeanwhile00.sock');
    await mkdir(join(stateDir, 'gw'), { recursive: true });
    await writeFile(stale, '');

    const second = await start(stateDir, () => provider);
    const restored = provider.calls.map(({ id, url: asked }) => ({ id, url: asked }));
    expect(restored).toHaveLength(2);
    expect(restored).toContainEqual({ id: reachable, url });
    // Each at its own socket again, listening before the relay joins anything to it.
    const socketPath = join(stateDir, 'gw', `${reachable}.sock`);
    expect(provider.calls.find((call) => call.id === reachable)?.socketPath).toBe(socketPath);
    expect(await answerOn(socketPath)).toMatch(/^HTTP\/1\.1 404/);
    await expect(stat(stale)).rejects.toThrow();
    expect(restored.map(({ id }) => id)).not.toContain(plain);
    // The agent inside asks nothing; a harness asking again gets the same URL.
    expect((await post(second.daemon, `/v1/sandboxes/${reachable}/gateway`)).json()).toEqual({ url });
  });
});
