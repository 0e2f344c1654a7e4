/**
 * Issue 24: a sandbox reaches exactly the hosts its policy allows, through the daemon's egress
 * proxy, and nothing else. Real Docker sandboxes with no network of their own; "the internet"
 * is servers on 127.0.0.x with names only the test's resolver knows (no traffic leaves the host).
 * The agent is the adversary: forged credentials, the daemon's own API, floods and slow readers.
 */
import { randomBytes } from 'node:crypto';
import { rm } from 'node:fs/promises';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { createServer as createTcpServer, type Server as TcpServer } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GymClient } from '../../client/client.ts';
import { startTestDaemon, type TestDaemon } from '../daemon-harness.ts';
import { dockerTestEnvironment, testImage } from '../docker-available.ts';
import { EGRESS_CLIENT } from './egress-client.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const debian = skipReason === undefined ? await testImage(docker, 'debian-base') : 'gym/debian-base:missing';

/** Every header the test's hosts received: nothing of the daemon's may be among them. */
const receivedHeaders: IncomingHttpHeaders[] = [];

function httpHost(address: string, answer: string): Promise<{ server: Server; port: number }> {
  const server = createServer((request, response) => {
    receivedHeaders.push(request.headers);
    response.end(answer);
  });
  return new Promise((resolve) =>
    server.listen(0, address, () => resolve({ server, port: (server.address() as { port: number }).port })),
  );
}

/** A host that streams without end once asked, counting what its socket accepted. */
function streamingHost(address: string): Promise<{ server: TcpServer; port: number; written: () => number }> {
  let written = 0;
  const chunk = Buffer.alloc(64 * 1024, 0x61);
  const server = createTcpServer((socket) => {
    socket.on('error', () => {});
    socket.once('data', () => {
      const pump = () => {
        while (!socket.destroyed && socket.write(chunk)) written += chunk.length;
        if (!socket.destroyed) {
          written += chunk.length;
          socket.once('drain', pump);
        }
      };
      pump();
    });
  });
  return new Promise((resolve) =>
    server.listen(0, address, () =>
      resolve({ server, port: (server.address() as { port: number }).port, written: () => written }),
    ),
  );
}

describe.skipIf(skipReason !== undefined)('egress through the daemon proxy (docker)', () => {
  let daemon: TestDaemon;
  let client: GymClient;
  let allowed: { server: Server; port: number };
  let other: { server: Server; port: number };
  let stream: Awaited<ReturnType<typeof streamingHost>>;
  let apiPort: number;
  const names: Record<string, string[]> = {};
  const resolved: string[] = [];

  const api = async (method: string, path: string, body?: unknown) => {
    const response = await fetch(`${daemon.address.url}${path}`, {
      method,
      headers: { ...daemon.auth, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    return { status: response.status, body: (await response.json()) as Record<string, unknown> };
  };
  const inside = async (id: string, op: Record<string, unknown>, timeoutMs = 30_000) => {
    const result = await client.exec(id, {
      argv: ['python3', '-c', EGRESS_CLIENT, JSON.stringify(op)],
      timeoutMs,
    });
    expect(result.status, result.stderr).toBe('ok');
    return JSON.parse(result.stdout.trim().split('\n').at(-1)!) as Record<string, unknown>;
  };

  beforeAll(async () => {
    allowed = await httpHost('127.0.0.2', 'hello from allowed.test');
    other = await httpHost('127.0.0.3', 'hello from other.test');
    stream = await streamingHost('127.0.0.4');
    Object.assign(names, {
      'allowed.test': ['127.0.0.2'],
      'other.test': ['127.0.0.3'],
      'stream.test': ['127.0.0.4'],
      'metadata.test': ['169.254.169.254'],
      'lan.test': ['10.1.2.3'],
      // Answers a private address first and an allowed one after: the private one is never used.
      'rebind.test': ['192.168.7.7', '127.0.0.2'],
    });
    daemon = await startTestDaemon(
      {
        namespace: `egress-${randomBytes(3).toString('hex')}`,
        gateway: { upstream: { baseUrl: 'http://127.0.0.9:9/v1', apiKey: 'sk-upstream-secret', model: 'm' } },
        egress: {
          allowedHosts: ['*.test:*'],
          allowPrivateAddresses: ['127.0.0.0/8'],
          maxConnectionsPerSandbox: 8,
          idleTimeoutSeconds: 5,
        },
      },
      {
        listen: true,
        egressResolver: async (host) => {
          resolved.push(host);
          const addresses = names[host];
          if (addresses === undefined) throw Object.assign(new Error('unknown'), { code: 'ENOTFOUND' });
          return addresses;
        },
      },
    );
    // The daemon's API is a name the agent may list: its port is refused all the same.
    apiPort = Number(new URL(daemon.address.url!).port);
    names['api.test'] = ['127.0.0.1'];
    client = new GymClient({ url: daemon.address.url!, token: daemon.token });
  }, 120_000);

  afterAll(async () => {
    await daemon?.stop({ destroy: true });
    if (daemon !== undefined) await rm(daemon.stateDir, { recursive: true, force: true });
    allowed?.server.close();
    other?.server.close();
    stream?.server.close();
  });

  it('opens the listed hosts only, and refuses raw IPs, private addresses, the API, DNS and direct sockets', async () => {
    const sandbox = await client.createSandbox({
      image: debian,
      network: {
        mode: 'allowlist',
        allowedHosts: ['allowed.test:*', 'api.test:*', 'metadata.test:*', 'lan.test:*', 'rebind.test:*'],
      },
    } as never);
    const environment = await inside(sandbox.id, { op: 'env' });
    expect(environment.HTTP_PROXY).toMatch(/^http:\/\/sbx[^:]*:[0-9a-f]{64}@127\.0\.0\.1:\d+$/);
    expect(environment.NO_PROXY).toBe('localhost,127.0.0.1');

    // Tools that honour http_proxy get through to the allowed host, by plain HTTP and by CONNECT.
    expect(await inside(sandbox.id, { op: 'urllib', url: `http://allowed.test:${allowed.port}/` })).toEqual({
      status: 200,
      body: 'hello from allowed.test',
    });
    expect(await inside(sandbox.id, { op: 'connect', target: `allowed.test:${allowed.port}` })).toEqual({
      status: 200,
      body: 'hello from allowed.test',
    });
    // A host not listed, its raw IP, a listed name pointing at metadata or a LAN address.
    expect((await inside(sandbox.id, { op: 'connect', target: `other.test:${other.port}` })).status).toBe(
      403,
    );
    expect((await inside(sandbox.id, { op: 'urllib', url: `http://other.test:${other.port}/` })).status).toBe(
      403,
    );
    expect((await inside(sandbox.id, { op: 'connect', target: `127.0.0.2:${allowed.port}` })).status).toBe(
      403,
    );
    expect((await inside(sandbox.id, { op: 'connect', target: 'metadata.test:80' })).status).toBe(403);
    expect((await inside(sandbox.id, { op: 'connect', target: 'lan.test:80' })).status).toBe(403);
    // DNS rebinding: the private answer is skipped, the connection goes to the allowed address.
    expect(await inside(sandbox.id, { op: 'connect', target: `rebind.test:${allowed.port}` })).toEqual({
      status: 200,
      body: 'hello from allowed.test',
    });
    // The daemon's own API, by a listed name and by plain HTTP: refused, whatever the operator allows.
    expect((await inside(sandbox.id, { op: 'connect', target: `api.test:${apiPort}` })).status).toBe(403);
    const viaGet = await inside(sandbox.id, { op: 'get', url: `http://api.test:${apiPort}/v1/sandboxes` });
    expect(viaGet.status).toBe(403);
    expect(viaGet.body).toContain("daemon's own API");
    // No DNS, no route: the sandbox alone reaches nothing.
    expect((await inside(sandbox.id, { op: 'dns', host: 'allowed.test' })).error).toBeDefined();
    expect(
      (await inside(sandbox.id, { op: 'direct', host: '127.0.0.2', port: allowed.port })).connected,
    ).toBe(false);

    const log = (await api('GET', `/v1/sandboxes/${sandbox.id}/network/log`)).body as {
      attempts: Array<{ host: string; port: number; verdict: string; reason?: string; bytesDown: number }>;
      dropped: number;
    };
    expect(log.dropped).toBe(0);
    const summary = log.attempts.map((attempt) => `${attempt.host}:${attempt.verdict}`);
    expect(summary).toEqual([
      'allowed.test:allowed',
      'allowed.test:allowed',
      'other.test:refused',
      'other.test:refused',
      '127.0.0.2:refused',
      'metadata.test:refused',
      'lan.test:refused',
      'rebind.test:allowed',
      'api.test:refused',
      'api.test:refused',
    ]);
    expect(log.attempts[0]!.bytesDown).toBeGreaterThan(0);
    expect(log.attempts[5]!.reason).toMatch(/link-local|private/);
    // The hosts never saw the sandbox's credential, the daemon's token or the gateway's upstream key.
    const seen = JSON.stringify(receivedHeaders);
    expect(seen).not.toContain('sk-upstream-secret');
    expect(seen).not.toContain(daemon.token);
    expect(seen.toLowerCase()).not.toContain('proxy-authorization');
  }, 180_000);

  it('a policy switch applies to new connections and cuts the open ones', async () => {
    const sandbox = await client.createSandbox({
      image: debian,
      network: { mode: 'allowlist', allowedHosts: ['allowed.test:*'] },
    } as never);
    const holding = inside(
      sandbox.id,
      { op: 'hold', target: `allowed.test:${allowed.port}`, seconds: 30 },
      60_000,
    );
    // Wait until the tunnel is open inside, then switch to the verifier's policy.
    for (let tries = 0; tries < 100; tries++) {
      const marker = await client.exec(sandbox.id, { argv: ['cat', '/tmp/hold-status'] });
      if (marker.stdout === '200') break;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    const switched = await api('PUT', `/v1/sandboxes/${sandbox.id}/network`, {
      mode: 'allowlist',
      allowedHosts: ['other.test:*'],
    });
    expect(switched.status, JSON.stringify(switched.body)).toBe(200);
    const held = await holding;
    expect(held.status).toBe(200);
    expect(held.closed).toBe(true);
    const cut = (await api('GET', `/v1/sandboxes/${sandbox.id}/network/log`)).body.attempts as Array<{
      reason?: string;
    }>;
    expect(cut.at(-1)?.reason).toBe('the sandbox network policy changed');
    expect((await inside(sandbox.id, { op: 'connect', target: `allowed.test:${allowed.port}` })).status).toBe(
      403,
    );
    expect((await inside(sandbox.id, { op: 'connect', target: `other.test:${other.port}` })).body).toBe(
      'hello from other.test',
    );
    // The operator's cap holds against the token: nothing beyond `*.test`, no public.
    const beyond = await api('PUT', `/v1/sandboxes/${sandbox.id}/network`, {
      mode: 'allowlist',
      allowedHosts: ['pypi.org'],
    });
    expect(beyond.status).toBe(403);
    expect((beyond.body as { error: { code: string } }).error.code).toBe('FORBIDDEN_BY_CONFIG');
    expect((await api('PUT', `/v1/sandboxes/${sandbox.id}/network`, { mode: 'public' })).status).toBe(403);
    // Back to none (an agent phase without network): the commands get no proxy variables, and
    // the credential an agent kept from before opens nothing.
    const { HTTP_PROXY: kept } = await inside(sandbox.id, { op: 'env' });
    expect((await api('PUT', `/v1/sandboxes/${sandbox.id}/network`, { mode: 'none' })).status).toBe(200);
    expect((await inside(sandbox.id, { op: 'env' })).HTTP_PROXY).toBeNull();
    expect(
      (await inside(sandbox.id, { op: 'connect', target: `other.test:${other.port}`, proxy: kept })).status,
    ).toBe(403);
  }, 180_000);

  it("one sandbox's credential never opens another's policy, and no credential opens nothing", async () => {
    const [open, closed] = await Promise.all([
      client.createSandbox({
        image: debian,
        network: { mode: 'allowlist', allowedHosts: ['allowed.test:*'] },
      } as never),
      client.createSandbox({
        image: debian,
        network: { mode: 'allowlist', allowedHosts: ['other.test:*'] },
      } as never),
    ]);
    const openEnvironment = await inside(open.id, { op: 'env' });
    const openSecret = new URL(openEnvironment.HTTP_PROXY as string).password;
    // From the closed sandbox: its own credential cannot reach allowed.test; the open one's id with
    // its own secret, or no credential at all, is a 407.
    const target = `allowed.test:${allowed.port}`;
    expect((await inside(closed.id, { op: 'connect', target })).status).toBe(403);
    expect((await inside(closed.id, { op: 'connect', target, user: open.id })).status).toBe(407);
    expect(
      (await inside(closed.id, { op: 'connect', target, user: open.id, secret: 'f'.repeat(64) })).status,
    ).toBe(407);
    expect((await inside(closed.id, { op: 'connect', target, auth: false })).status).toBe(407);
    expect((await inside(closed.id, { op: 'get', url: `http://${target}/`, auth: false })).status).toBe(407);
    // The secret alone is not transferable to another id either.
    expect(
      (await inside(closed.id, { op: 'connect', target, user: closed.id, secret: openSecret })).status,
    ).toBe(407);
    // The proxy is not a door to the daemon's API routes on the gateway socket.
    const apiRoute = await inside(closed.id, { op: 'get', url: '/v1/sandboxes' });
    expect(apiRoute.status).toBe(404);
    expect((await api('GET', `/v1/sandboxes/${open.id}/network/log`)).body.attempts).toEqual([]);
  }, 180_000);

  it('bounds a connection flood and a slow reader', async () => {
    const sandbox = await client.createSandbox({
      image: debian,
      network: { mode: 'allowlist', allowedHosts: ['allowed.test:*', 'stream.test:*'] },
    } as never);
    const flood = await inside(sandbox.id, {
      op: 'flood',
      target: `allowed.test:${allowed.port}`,
      count: 40,
    });
    expect(flood).toEqual({ '200': 8, '429': 32 });
    // The slots come back once the flood's tunnels are gone.
    expect((await inside(sandbox.id, { op: 'connect', target: `allowed.test:${allowed.port}` })).status).toBe(
      200,
    );

    const before = stream.written();
    const slow = inside(sandbox.id, { op: 'slow', target: `stream.test:${stream.port}`, seconds: 4 }, 60_000);
    await new Promise((resolve) => setTimeout(resolve, 3000));
    const during = stream.written() - before;
    expect((await slow).status).toBe(200);
    console.info(
      `a reader that reads nothing for 3 s let the host write ${(during / 1024 / 1024).toFixed(1)} MiB`,
    );
    // Socket buffers along the way hold a few MiB; a proxy that buffered would have taken far more.
    expect(during).toBeLessThan(32 * 1024 * 1024);
    const attempts = (await api('GET', `/v1/sandboxes/${sandbox.id}/network/log`)).body.attempts as Array<{
      verdict: string;
      reason?: string;
    }>;
    expect(attempts.filter((attempt) => attempt.reason?.includes('maxConnectionsPerSandbox')).length).toBe(
      32,
    );
  }, 180_000);
});
