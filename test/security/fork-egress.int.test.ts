/**
 * Issue 36, item 3: a fork child never uses its parent's egress rights. A parent with an
 * allow-list writes its HTTP_PROXY (credential included) to a file; its children (a fork, and a
 * sandbox started from the fork's snapshot with an allow-list of its own) find the file and try
 * the parent's credential through their own relay, by CONNECT and by plain HTTP. Each is refused
 * and logged as the child's, and the parent's log shows none of it. Real Docker sandboxes with no
 * network of their own; "the internet" is servers on 127.0.0.x with names only the test's
 * resolver knows.
 *
 * And issue 36, item 5, through a real sandbox: a listed name that resolves to the daemon's API in
 * the IPv4-mapped hex spelling (`::ffff:7f00:1`) is refused like its dotted form.
 */
import { randomBytes } from 'node:crypto';
import { rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GymClient } from '../../client/client.ts';
import { startTestDaemon, type TestDaemon } from '../daemon-harness.ts';
import { dockerTestEnvironment, testImage } from '../docker-available.ts';
import { EGRESS_CLIENT } from './egress-client.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const debian = skipReason === undefined ? await testImage(docker, 'debian-base') : 'gym/debian-base:missing';

function httpHost(address: string, answer: string): Promise<{ server: Server; port: number }> {
  const server = createServer((_request, response) => response.end(answer));
  return new Promise((resolve) =>
    server.listen(0, address, () => resolve({ server, port: (server.address() as { port: number }).port })),
  );
}

type Attempt = { host: string; verdict: string; reason?: string };

describe.skipIf(skipReason !== undefined)('egress rights of forks (docker)', () => {
  let daemon: TestDaemon;
  let client: GymClient;
  let allowed: { server: Server; port: number };
  let other: { server: Server; port: number };
  let apiPort: number;
  const names: Record<string, string[]> = {};

  const api = async (method: string, path: string, body?: unknown) => {
    const response = await fetch(`${daemon.address.url}${path}`, {
      method,
      headers: { ...daemon.auth, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    return { status: response.status, body: (await response.json()) as Record<string, unknown> };
  };
  const inside = async (id: string, op: Record<string, unknown>, env: Record<string, string> = {}) => {
    const result = await client.exec(id, {
      argv: ['python3', '-c', EGRESS_CLIENT, JSON.stringify(op)],
      env,
      timeoutMs: 30_000,
    });
    expect(result.status, result.stderr).toBe('ok');
    return JSON.parse(result.stdout.trim().split('\n').at(-1)!) as Record<string, unknown>;
  };
  const logOf = async (id: string) =>
    (await api('GET', `/v1/sandboxes/${id}/network/log`)).body.attempts as Attempt[];

  beforeAll(async () => {
    allowed = await httpHost('127.0.0.2', 'hello from allowed.test');
    other = await httpHost('127.0.0.3', 'hello from other.test');
    Object.assign(names, { 'allowed.test': ['127.0.0.2'], 'other.test': ['127.0.0.3'] });
    daemon = await startTestDaemon(
      {
        namespace: `fork-egress-${randomBytes(3).toString('hex')}`,
        egress: { allowedHosts: ['*.test:*'], allowPrivateAddresses: ['127.0.0.0/8'] },
      },
      {
        listen: true,
        egressResolver: async (host) => {
          const addresses = names[host];
          if (addresses === undefined) throw Object.assign(new Error('unknown'), { code: 'ENOTFOUND' });
          return addresses;
        },
      },
    );
    apiPort = Number(new URL(daemon.address.url!).port);
    names['api.test'] = ['127.0.0.1'];
    names['mapped-api.test'] = ['::ffff:7f00:1'];
    names['expanded-api.test'] = ['0:0:0:0:0:ffff:7f00:1'];
    client = new GymClient({ url: daemon.address.url!, token: daemon.token });
  }, 120_000);

  afterAll(async () => {
    await daemon?.stop({ destroy: true });
    if (daemon !== undefined) await rm(daemon.stateDir, { recursive: true, force: true });
    allowed?.server.close();
    other?.server.close();
  });

  it("refuses a child its parent's credential, by fork or from the snapshot, and logs it as the child's", async () => {
    const parent = await client.createSandbox({
      image: debian,
      network: { mode: 'allowlist', allowedHosts: ['allowed.test:*'] },
    } as never);
    const target = `allowed.test:${allowed.port}`;
    expect((await inside(parent.id, { op: 'connect', target })).body).toBe('hello from allowed.test');
    // The agent keeps its credential where a copy of its files will find it.
    const saved = await client.exec(parent.id, {
      command: 'printf %s "$HTTP_PROXY" > /root/.parent-proxy && cat /root/.parent-proxy',
    });
    const parentProxy = new URL(saved.stdout);
    expect(parentProxy.password).toMatch(/^[0-9a-f]{64}$/);
    const parentLog = (await logOf(parent.id)).length;

    const forked = await api('POST', `/v1/sandboxes/${parent.id}/fork`, { count: 1 });
    expect(forked.status, JSON.stringify(forked.body)).toBe(201);
    const child = (forked.body.sandboxes as Array<{ id: string }>)[0]!.id;
    const snapshot = (forked.body.snapshot as { id: string }).id;
    // A fork child under `none` that has gateway reach (for its model calls), and a sandbox from
    // the fork's snapshot with an allow-list of its own that does not list allowed.test.
    const reach = await api('POST', `/v1/sandboxes/${child}/gateway`);
    expect(reach.status, JSON.stringify(reach.body)).toBe(200);
    const fromSnapshot = await client.createSandbox({
      image: `snapshot:${snapshot}`,
      network: { mode: 'allowlist', allowedHosts: ['other.test:*'] },
    } as never);
    const childUrls: Record<string, string> = {
      [child]: (reach.body as { url: string }).url,
      // It has reach for its policy already: asked again, the daemon answers the same URL.
      [fromSnapshot.id]: (await api('POST', `/v1/sandboxes/${fromSnapshot.id}/gateway`)).body.url as string,
    };

    for (const id of [child, fromSnapshot.id]) {
      expect((await client.exec(id, { command: 'cat /root/.parent-proxy' })).stdout).toBe(saved.stdout);
      // The parent's credential, through the child's own relay (the port the child's gateway URL names).
      const stolen = new URL(saved.stdout);
      stolen.port = new URL(childUrls[id]!).port;
      const proxy = stolen.toString().replace(/\/$/, '');
      const tunnel = await inside(id, { op: 'connect', target, proxy });
      expect(tunnel.status, `${id} ${proxy} ${JSON.stringify(tunnel)}`).toBe(407);
      const plain = await inside(id, { op: 'get', url: `http://${target}/`, proxy });
      expect(plain.status, `${id} ${JSON.stringify(plain)}`).toBe(407);
      // A tool that reads the variables, given the parent's.
      const tool = await inside(
        id,
        { op: 'urllib', url: `http://${target}/` },
        { http_proxy: proxy, HTTP_PROXY: proxy },
      );
      expect(tool.status, `${id} ${JSON.stringify(tool)}`).toBe(407);
      const childLog = await logOf(id);
      expect(childLog.map((attempt) => [attempt.host, attempt.verdict, attempt.reason])).toEqual([
        ['allowed.test', 'refused', "another sandbox's credential"],
        ['allowed.test', 'refused', "another sandbox's credential"],
        ['allowed.test', 'refused', "another sandbox's credential"],
      ]);
    }
    // The sandbox from the snapshot has its own rights, and only those.
    expect((await inside(fromSnapshot.id, { op: 'connect', target: `other.test:${other.port}` })).body).toBe(
      'hello from other.test',
    );
    expect((await inside(fromSnapshot.id, { op: 'connect', target })).status).toBe(403);
    // The parent's log holds none of its children's attempts; its own rights are as they were.
    expect((await logOf(parent.id)).length).toBe(parentLog);
    expect((await inside(parent.id, { op: 'connect', target })).body).toBe('hello from allowed.test');
  }, 300_000);

  it("refuses the daemon's API by a listed name that resolves to it in an IPv4-mapped spelling", async () => {
    const sandbox = await client.createSandbox({
      image: debian,
      network: {
        mode: 'allowlist',
        allowedHosts: ['api.test:*', 'mapped-api.test:*', 'expanded-api.test:*'],
      },
    } as never);
    for (const name of ['api.test', 'mapped-api.test', 'expanded-api.test']) {
      const tunnel = await inside(sandbox.id, { op: 'connect', target: `${name}:${apiPort}` });
      expect(tunnel.status, name).toBe(403);
      const plain = await inside(sandbox.id, { op: 'get', url: `http://${name}:${apiPort}/v1/sandboxes` });
      expect(plain.status, name).toBe(403);
      expect(plain.body, name).toContain("daemon's own API");
    }
  }, 180_000);
});
