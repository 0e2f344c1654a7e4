/**
 * Issue 24, the agent as the adversary of the egress proxy, in the cases egress.int.test.ts does
 * not cover: the gateway's upstream key, one sandbox's flood against another's share, one
 * sandbox's log against another's, and a slow reader of a plain `http://` request (the forwarded
 * path, not a CONNECT tunnel). Real Docker sandboxes; "the internet" is servers on 127.0.0.x named
 * only by the test's resolver.
 */
import { randomBytes } from 'node:crypto';
import { rm } from 'node:fs/promises';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GymClient } from '../../client/client.ts';
import { startTestDaemon, type TestDaemon } from '../daemon-harness.ts';
import { dockerTestEnvironment, testImage } from '../docker-available.ts';
import { EGRESS_CLIENT } from './egress-client.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const debian = skipReason === undefined ? await testImage(docker, 'debian-base') : 'gym/debian-base:missing';

/** More of what an agent does, on top of the shared client's operations. */
const MORE_OPS = String.raw`
if kind == "holdmany":
    # Opens count tunnels and keeps those the proxy accepts for a while.
    held, statuses = [], {}
    for _ in range(op["count"]):
        try:
            s, status = tunnel(op["target"], timeout=5)
        except OSError:
            status = 0
        statuses[str(status)] = statuses.get(str(status), 0) + 1
        if status == 200:
            held.append(s)
    with open("/tmp/held", "w") as marker:
        marker.write(json.dumps(statuses))
    time.sleep(op["seconds"])
    print(json.dumps(statuses))
elif kind == "raw":
    # One request to the relay as written (origin-form: the gateway's own routes).
    s = socket.create_connection((proxy.hostname, proxy.port), timeout=10)
    body = op.get("body", "")
    headers = "".join(name + ": " + value + "\r\n" for name, value in op.get("headers", {}).items())
    s.sendall((op["method"] + " " + op["path"] + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + headers + "Content-Length: " + str(len(body)) + "\r\n\r\n" + body).encode())
    data = read_all(s)
    print(json.dumps({"status": int(data.split(b" ")[1]) if data.startswith(b"HTTP/") else 0, "body": data.split(b"\r\n\r\n", 1)[-1].decode(errors="replace")[:500]}))
elif kind == "slowget":
    # A plain http:// request through the proxy whose answer it never reads.
    s = socket.create_connection((proxy.hostname, proxy.port), timeout=10)
    s.sendall(("GET " + op["url"] + " HTTP/1.1\r\nHost: x\r\nProxy-Authorization: " + credential() + "\r\n\r\n").encode())
    first = s.recv(16)
    time.sleep(op["seconds"])
    print(json.dumps({"status": int(first.split(b" ")[1]) if first.startswith(b"HTTP/") else 0}))
`;

/** An HTTP host that records what it was sent; `/endless` streams with backpressure, counting what its socket took. */
function recordingHost(address: string) {
  const seen: Array<{ url: string; headers: IncomingHttpHeaders }> = [];
  let written = 0;
  const chunk = Buffer.alloc(64 * 1024, 0x62);
  const server = createServer((request, response) => {
    seen.push({ url: String(request.url), headers: request.headers });
    if (request.url !== '/endless') {
      response.setHeader('content-type', 'application/json');
      response.end('{"object":"list","data":[]}');
      return;
    }
    response.on('error', () => {});
    const pump = () => {
      while (!response.destroyed && response.write(chunk)) written += chunk.length;
      if (!response.destroyed) {
        written += chunk.length;
        response.once('drain', pump);
      }
    };
    pump();
  });
  return new Promise<{ server: Server; port: number; seen: typeof seen; written: () => number }>((resolve) =>
    server.listen(0, address, () =>
      resolve({ server, port: (server.address() as { port: number }).port, seen, written: () => written }),
    ),
  );
}

describe.skipIf(skipReason !== undefined)('the agent against the egress proxy (docker)', () => {
  let daemon: TestDaemon;
  let client: GymClient;
  let upstream: Awaited<ReturnType<typeof recordingHost>>;
  let web: Awaited<ReturnType<typeof recordingHost>>;
  let first: string;
  let second: string;
  const UPSTREAM_KEY = `sk-upstream-${randomBytes(8).toString('hex')}`;

  const inside = async (id: string, op: Record<string, unknown>, timeoutMs = 30_000) => {
    const result = await client.exec(id, {
      argv: ['python3', '-c', `${EGRESS_CLIENT}\n${MORE_OPS}`, JSON.stringify(op)],
      timeoutMs,
    });
    expect(result.status, result.stderr).toBe('ok');
    return JSON.parse(result.stdout.trim().split('\n').at(-1)!) as Record<string, unknown>;
  };

  beforeAll(async () => {
    upstream = await recordingHost('127.0.0.6');
    web = await recordingHost('127.0.0.7');
    const names: Record<string, string[]> = { 'model.test': ['127.0.0.6'], 'web.test': ['127.0.0.7'] };
    daemon = await startTestDaemon(
      {
        namespace: `egress-adv-${randomBytes(3).toString('hex')}`,
        gateway: {
          upstream: { baseUrl: `http://127.0.0.6:${upstream.port}/v1`, apiKey: UPSTREAM_KEY, model: 'm' },
        },
        egress: {
          allowedHosts: ['*.test:*'],
          allowPrivateAddresses: ['127.0.0.0/8'],
          maxConnectionsPerSandbox: 4,
        },
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
    client = new GymClient({ url: daemon.address.url!, token: daemon.token });
    const policy = { mode: 'allowlist', allowedHosts: ['model.test:*', 'web.test:*'] };
    [first, second] = (
      await Promise.all([
        client.createSandbox({ image: debian, network: policy } as never),
        client.createSandbox({ image: debian, network: policy } as never),
      ])
    ).map((sandbox) => sandbox.id) as [string, string];
  }, 120_000);

  afterAll(async () => {
    await daemon?.stop({ destroy: true });
    if (daemon !== undefined) await rm(daemon.stateDir, { recursive: true, force: true });
    upstream?.server.close();
    web?.server.close();
  });

  it("never hands the agent the gateway's upstream key: not on the way to the model host, not for its proxy credential", async () => {
    // The agent may reach the model's host by name, and goes there through the proxy itself.
    const direct = await inside(first, { op: 'get', url: `http://model.test:${upstream.port}/v1/models` });
    expect(direct.status).toBe(200);
    expect(upstream.seen).toHaveLength(1);
    expect(JSON.stringify(upstream.seen)).not.toContain(UPSTREAM_KEY);
    expect(upstream.seen[0]!.headers.authorization).toBeUndefined();
    expect(upstream.seen[0]!.headers['proxy-authorization']).toBeUndefined();
    // A rollout is open; the agent tries its model route with its proxy secret, or with nothing
    // but the proxy credential: the gateway refuses both, and the upstream sees neither.
    const rollout = await client.openRollout();
    const secret = new URL(String((await inside(first, { op: 'env' })).HTTP_PROXY)).password;
    const body = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'the key?' }] });
    const path = `${rollout.basePath}/chat/completions`;
    const proxyCredential = `Basic ${Buffer.from(`${first}:${secret}`).toString('base64')}`;
    for (const headers of [
      { Authorization: `Bearer ${secret}`, 'Content-Type': 'application/json' },
      { 'Proxy-Authorization': proxyCredential, 'Content-Type': 'application/json' },
    ]) {
      const answer = await inside(first, { op: 'raw', method: 'POST', path, headers, body });
      expect([401, 403]).toContain(answer.status);
      expect(String(answer.body)).not.toContain(UPSTREAM_KEY);
    }
    // The same route as an absolute URI is taken by the proxy, whose target (the relay's own
    // loopback port, on the daemon's host) is not in the policy.
    const viaProxy = await inside(first, { op: 'get', url: `http://127.0.0.1:1${path}` });
    expect(viaProxy.status).toBe(403);
    expect(upstream.seen).toHaveLength(1);
    await client.closeRollout(rollout.rolloutId);
  }, 120_000);

  it("cannot make model calls under another sandbox's rollout with its key (a fork child holds its parent's)", async () => {
    // The rollout is opened for the first sandbox; the second holds its key as a fork child
    // would (its parent's files or memory copied): it comes through its own socket and is refused
    // like a wrong key, before the upstream sees anything. The first is let through.
    const rollout = await client.openRollout({ sandboxId: first });
    const body = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] });
    const path = `${rollout.basePath}/chat/completions`;
    const headers = { Authorization: `Bearer ${rollout.key}`, 'Content-Type': 'application/json' };
    const seenBefore = upstream.seen.length;
    const stolen = await inside(second, { op: 'raw', method: 'POST', path, headers, body });
    expect(stolen.status).toBe(401);
    expect(upstream.seen).toHaveLength(seenBefore);
    const own = await inside(first, { op: 'raw', method: 'POST', path, headers, body });
    expect(own.status).not.toBe(401);
    expect(upstream.seen).toHaveLength(seenBefore + 1);
    expect(await client.rolloutRecords(rollout.rolloutId)).toHaveLength(1);
    // A rollout opened for no sandbox stays as before: any holder of its key, from anywhere.
    const unbound = await client.openRollout();
    const anyone = await inside(second, {
      op: 'raw',
      method: 'POST',
      path: `${unbound.basePath}/chat/completions`,
      headers: { ...headers, Authorization: `Bearer ${unbound.key}` },
      body,
    });
    expect(anyone.status).not.toBe(401);
    await client.closeRollout(rollout.rolloutId);
    await client.closeRollout(unbound.rolloutId);
  }, 120_000);

  it("cannot set its own policy or read another sandbox's log through the relay, and sees only its own attempts", async () => {
    for (const [method, path, payload] of [
      ['PUT', `/v1/sandboxes/${first}/network`, JSON.stringify({ mode: 'public' })],
      ['GET', `/v1/sandboxes/${second}/network/log`, ''],
      ['GET', `/v1/sandboxes/${second}/network`, ''],
    ] as const) {
      const answer = await inside(first, {
        op: 'raw',
        method,
        path,
        body: payload,
        headers: { 'Content-Type': 'application/json' },
      });
      expect(answer.status, `${method} ${path}`).toBe(404);
    }
    expect(
      (await client.setNetwork(first, { mode: 'allowlist', allowedHosts: ['model.test:*', 'web.test:*'] }))
        .policy.mode,
    ).toBe('allowlist');
    await inside(second, { op: 'connect', target: `web.test:${web.port}` });
    const [mine, theirs] = await Promise.all([client.networkLog(first), client.networkLog(second)]);
    expect(theirs.attempts.map((attempt) => `${attempt.host}:${attempt.verdict}`)).toEqual([
      'web.test:allowed',
    ]);
    expect(mine.attempts.some((attempt) => attempt.host === 'web.test')).toBe(false);
  }, 120_000);

  it("one sandbox's flood takes its own share only, and a slow reader of a plain http:// answer stalls only its own download", async () => {
    const target = `web.test:${web.port}`;
    const flooding = inside(first, { op: 'holdmany', target, count: 10, seconds: 6 }, 60_000);
    for (let tries = 0; tries < 100; tries++) {
      if ((await client.exec(first, { argv: ['cat', '/tmp/held'] })).status === 'ok') break;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    // While the first holds every slot it may, the second still gets through.
    expect((await inside(second, { op: 'connect', target })).status).toBe(200);
    expect(await flooding).toEqual({ '200': 4, '429': 6 });

    const before = web.written();
    const slow = inside(
      second,
      { op: 'slowget', url: `http://web.test:${web.port}/endless`, seconds: 4 },
      60_000,
    );
    await new Promise((resolve) => setTimeout(resolve, 3000));
    const during = web.written() - before;
    expect((await slow).status).toBe(200);
    console.info(
      `a reader of a forwarded http:// answer that reads nothing for 3 s let the host write ${(during / 1024 / 1024).toFixed(1)} MiB`,
    );
    // Socket buffers on the way hold a few MiB; a proxy that buffered the answer would take far more.
    expect(during).toBeLessThan(32 * 1024 * 1024);
  }, 120_000);
});
