/**
 * Declared ports on real Docker, through the daemon's HTTP API: a service started in a sandbox
 * without network is fetched through `/v1/sandboxes/{id}/ports/{port}/` with the sandbox's port
 * key, a WebSocket-style upgrade is carried both ways, and what is not declared, not keyed or
 * keyed for another sandbox is refused.
 */
import { randomBytes } from 'node:crypto';
import { request as httpRequest } from 'node:http';
import type { Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GymClient } from '../client/client.ts';
import { startTestDaemon, type TestDaemon } from '../test/daemon-harness.ts';
import { dockerTestEnvironment, testImage } from '../test/docker-available.ts';
import { relayBinaryForTests } from '../test/relay-binary.ts';

const { docker, skipReason } = await dockerTestEnvironment();

/** Answers an upgrade with 101, then echoes every byte (an `nc -ll -e` handler). */
const UPGRADE_ECHO = [
  '#!/bin/sh',
  'while read -r line; do line=$(printf %s "$line" | tr -d "\\r"); [ -z "$line" ] && break; done',
  'printf "HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: echo\\r\\nConnection: Upgrade\\r\\n\\r\\n"',
  'exec cat',
  '',
].join('\n');

/** Answers a request with its own body (an `nc -ll -e` handler): what a JSON API in a sandbox does. */
const BODY_ECHO = [
  '#!/bin/sh',
  'length=0',
  'while read -r line; do line=$(printf %s "$line" | tr -d "\\r"); [ -z "$line" ] && break;',
  '  case "$line" in [Cc]ontent-[Ll]ength:*) length=${line#*: };; esac; done',
  'body=$(head -c "$length")',
  'printf "HTTP/1.1 200 OK\\r\\nContent-Type: application/json\\r\\nContent-Length: %s\\r\\nConnection: close\\r\\n\\r\\n%s" "${#body}" "$body"',
  '',
].join('\n');

describe.skipIf(skipReason !== undefined)('declared ports through the daemon (docker)', () => {
  let daemon: TestDaemon;
  let client: GymClient;
  let base: string;
  let served: string;
  let other: string;

  beforeAll(async () => {
    const image = await testImage(docker, 'busybox');
    daemon = await startTestDaemon(
      {
        namespace: `ports-${randomBytes(3).toString('hex')}`,
        providers: [{ name: 'docker', options: { relayHelperPath: relayBinaryForTests() } }],
      },
      { listen: true },
    );
    base = daemon.address.url!;
    client = new GymClient({ url: base, token: daemon.token });
    const spec = {
      image,
      ports: [8080, 8081, 8082],
      files: [
        { path: '/www/index.html', content: 'hello from the sandbox\n' },
        { path: '/upgrade-echo.sh', content: UPGRADE_ECHO, mode: 0o755 },
        { path: '/body-echo.sh', content: BODY_ECHO, mode: 0o755 },
      ],
    };
    served = (await client.createSandbox(spec)).id;
    other = (await client.createSandbox(spec)).id;
    for (const id of [served, other]) {
      const started = await client.exec(id, {
        command:
          'httpd -p 8080 -h /www && (nc -ll -p 8081 -e /upgrade-echo.sh </dev/null >/dev/null 2>&1 &) && (nc -ll -p 8082 -e /body-echo.sh </dev/null >/dev/null 2>&1 &)',
      });
      expect(started.exitCode, started.stderr).toBe(0);
    }
  }, 120_000);

  afterAll(async () => {
    await daemon?.cleanup();
  });

  async function endpoint(
    id: string,
    port: number,
  ): Promise<{ path: string; headers: Record<string, string> }> {
    const response = await fetch(`${base}/v1/sandboxes/${id}/ports/${port}`, {
      headers: { authorization: `Bearer ${daemon.token}` },
    });
    expect(response.status).toBe(200);
    return (await response.json()) as { path: string; headers: Record<string, string> };
  }

  it('fetches a page a service in a network-less sandbox serves, with its port key', async () => {
    const { path, headers } = await endpoint(served, 8080);
    expect(path).toBe(`/v1/sandboxes/${served}/ports/8080/`);
    const response = await fetch(`${base}${path}index.html`, { headers });
    expect(response.status).toBe(200);
    expect(await response.text()).toBe('hello from the sandbox\n');
    // The service's page runs in an opaque origin, never as the daemon's.
    expect(response.headers.get('content-security-policy')).toBe('sandbox');
    const missing = await fetch(`${base}${path}nothing-here`, { headers });
    expect(missing.status).toBe(404);
  });

  it('refuses a request without the key, with the API token instead, or with another sandbox key', async () => {
    const { path } = await endpoint(served, 8080);
    const { headers: otherHeaders } = await endpoint(other, 8080);
    const bare = await fetch(`${base}${path}index.html`);
    expect(bare.status).toBe(401);
    const withToken = await fetch(`${base}${path}index.html`, {
      headers: { authorization: `Bearer ${daemon.token}` },
    });
    expect(withToken.status).toBe(401);
    const crossed = await fetch(`${base}${path}index.html`, { headers: otherHeaders });
    expect(crossed.status).toBe(401);
    expect(((await crossed.json()) as { error: { code: string } }).error.code).toBe('UNAUTHORIZED');
  });

  it('refuses a port the spec did not declare', async () => {
    const info = await fetch(`${base}/v1/sandboxes/${served}/ports/22`, {
      headers: { authorization: `Bearer ${daemon.token}` },
    });
    expect(info.status).toBe(400);
    const { headers } = await endpoint(served, 8080);
    const proxied = await fetch(`${base}/v1/sandboxes/${served}/ports/22/`, { headers });
    expect(proxied.status).toBe(400);
    expect(((await proxied.json()) as { error: { message: string } }).error.message).toMatch(/not declared/);
  });

  it('streams a request body to the service untouched, JSON included', async () => {
    const { path, headers } = await endpoint(served, 8082);
    const body = JSON.stringify({ method: 'tools/call', params: { text: 'x'.repeat(100_000) } });
    let response = await fetch(`${base}${path}rpc`, {
      method: 'POST',
      headers: { ...headers, 'content-type': 'application/json' },
      body,
    });
    for (let attempt = 0; attempt < 100 && response.status === 502; attempt += 1) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      response = await fetch(`${base}${path}rpc`, {
        method: 'POST',
        headers: { ...headers, 'content-type': 'application/json' },
        body,
      });
    }
    expect(response.status).toBe(200);
    expect(await response.text()).toBe(body);
  });

  it('carries an upgrade both ways', async () => {
    const { path, headers } = await endpoint(served, 8081);
    const url = new URL(`${base}${path}`);
    const socket = await new Promise<Socket>((resolve, reject) => {
      const upgrade = httpRequest({
        host: url.hostname,
        port: url.port,
        path: url.pathname,
        headers: { ...headers, connection: 'Upgrade', upgrade: 'echo' },
      });
      upgrade.on('upgrade', (answer, upgraded) => {
        expect(answer.statusCode).toBe(101);
        resolve(upgraded);
      });
      upgrade.on('response', (answer) => reject(new Error(`no upgrade: ${answer.statusCode}`)));
      upgrade.on('error', reject);
      upgrade.end();
    });
    const echoed = new Promise<string>((resolve) => {
      let text = '';
      socket.on('data', (chunk: Buffer) => {
        text += chunk.toString();
        if (text.includes('pong')) resolve(text);
      });
    });
    socket.write('ping pong');
    expect(await echoed).toBe('ping pong');
    socket.destroy();
  });

  it('says so when nothing listens on a declared port', async () => {
    await client.exec(other, { command: 'kill $(pidof httpd)' });
    const { path, headers } = await endpoint(other, 8080);
    const response = await fetch(`${base}${path}`, { headers });
    expect(response.status).toBe(502);
    expect(((await response.json()) as { error: { message: string } }).error.message).toMatch(
      /nothing accepts connections on port 8080/,
    );
  });

  it('closes the relay with the sandbox', async () => {
    expect(daemon.manager.ports.openRelays).toBeGreaterThan(0);
    await client.destroySandbox(other);
    await client.destroySandbox(served);
    expect(daemon.manager.ports.openRelays).toBe(0);
  });
});
