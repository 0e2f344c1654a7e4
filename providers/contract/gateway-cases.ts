import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { networkInterfaces, tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it as vitestIt } from 'vitest';
import type { ExecResult } from '../../core/schemas/exec.ts';
import type { SandboxProvider } from '../sandbox-provider.ts';
import type { SandboxFixture } from './fixture.ts';

/**
 * Fetches a URL from inside the sandbox and prints the body: busybox `wget` where there is one,
 * else Python's urllib (a Debian image without wget).
 */
const HTTP_GET = `
if command -v wget >/dev/null 2>&1; then exec wget -q -O - "$1"; fi
if command -v python3 >/dev/null 2>&1; then
  exec python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' "$1"
fi
echo 'the contract image needs wget or python3 for the gateway cases' >&2; exit 127
`;

/** What the stand-in gateway answers: the request it got, so a test sees the path arrived whole. */
const GATEWAY_ANSWER = (method: string | undefined, url: string | undefined) => `gateway ${method} ${url}`;

async function listen(server: Server, where: { path: string } | { host: string; port: 0 }): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(where, () => resolve());
  });
}

/**
 * Gateway reach (`exposeGateway`): an agent in the sandbox reaches the daemon's gateway socket
 * at the URL given and nothing else, the URL stays the same for the sandbox, and a new provider
 * instance (a restarted daemon) restores it. Skipped without the `gatewayReach` capability.
 */
export function defineGatewayCases(fixture: SandboxFixture): void {
  const it = (name: string, body: () => Promise<void>) =>
    vitestIt(name, async (context) => {
      const { provider } = fixture;
      if (!provider.capabilities.gatewayReach || provider.exposeGateway === undefined) context.skip();
      await body();
    });
  let directory = '';
  let socketPath = '';
  const gateway = createServer((request, response) =>
    response.end(GATEWAY_ANSWER(request.method, request.url)),
  );
  // Stands for everything else on the host (the daemon's API, the engine, other services).
  let hostRequests = 0;
  const hostService = createServer((_request, response) => {
    hostRequests += 1;
    response.end('host');
  });

  beforeAll(async () => {
    directory = await mkdtemp(join(tmpdir(), 'gym-contract-gateway-'));
    socketPath = join(directory, 'gateway.sock');
    await listen(gateway, { path: socketPath });
    await listen(hostService, { host: '0.0.0.0', port: 0 });
  });

  afterAll(async () => {
    gateway.close();
    hostService.close();
    if (directory !== '') await rm(directory, { recursive: true, force: true });
  });

  const expose = (id: string, provider: SandboxProvider = fixture.provider, url?: string) =>
    provider.exposeGateway!(id, { socketPath, ...(url === undefined ? {} : { url }) });
  const get = (id: string, url: string): Promise<ExecResult> =>
    fixture.exec(id, { argv: ['sh', '-c', HTTP_GET, 'http-get', url], timeoutMs: 20_000 });

  it('reaches the gateway at the URL given, the same URL every time, in each sandbox', async () => {
    const [first, second] = await Promise.all([fixture.create(), fixture.create()]);
    const { url } = await expose(first.id);
    expect(url, 'an origin: scheme, host and port, no path').toMatch(/^https?:\/\/[^/]+$/);
    const answer = await get(first.id, `${url}/v1/gateway/ro-1/v1/models?x=1`);
    expect(answer.stdout, answer.stderr).toBe(GATEWAY_ANSWER('GET', '/v1/gateway/ro-1/v1/models?x=1'));
    expect(await expose(first.id)).toEqual({ url });

    // Two sandboxes on one backend never collide, whatever the port each got.
    const other = await expose(second.id);
    const otherAnswer = await get(second.id, `${other.url}/v1/models`);
    expect(otherAnswer.stdout, otherAnswer.stderr).toBe(GATEWAY_ANSWER('GET', '/v1/models'));
    expect((await get(first.id, `${url}/again`)).stdout).toBe(GATEWAY_ANSWER('GET', '/again'));
  });

  it('reaches nothing else: not a service of the host, on any of its addresses', async () => {
    const info = await fixture.create();
    const { url } = await expose(info.id);
    const { port } = hostService.address() as { port: number };
    const hosts = new Set(['127.0.0.1', new URL(url).hostname]);
    for (const addresses of Object.values(networkInterfaces())) {
      for (const address of addresses ?? []) if (address.family === 'IPv4') hosts.add(address.address);
    }
    for (const host of hosts) {
      const result = await get(info.id, `http://${host}:${port}/`);
      expect(result.stdout, `the sandbox reached ${host}:${port} on the host`).not.toContain('host');
    }
    expect(hostRequests).toBe(0);
  });

  it('is released by close, and a new provider instance restores it at the same URL', async () => {
    const info = await fixture.create();
    // Two more instances stand for a daemon and the one restarted after it.
    const before = await fixture.options.createProvider();
    const { url } = await expose(info.id, before);
    expect((await get(info.id, `${url}/before`)).stdout).toBe(GATEWAY_ANSWER('GET', '/before'));
    await before.close();
    const released = await get(info.id, `${url}/released`);
    expect(released.stdout).not.toContain('gateway');

    const after = await fixture.options.createProvider();
    try {
      expect(await expose(info.id, after, url)).toEqual({ url });
      expect((await get(info.id, `${url}/after`)).stdout).toBe(GATEWAY_ANSWER('GET', '/after'));
    } finally {
      await after.close();
    }
  });
}
