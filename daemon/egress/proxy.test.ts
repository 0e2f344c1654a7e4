/**
 * The proxy's data path without a sandbox: a tunnel on a sandbox's own gateway socket (as its
 * relay reaches the daemon) to a host on loopback. The host's end must not cut the bytes the
 * sandbox has not read yet; a credential opens nothing but through its own sandbox's socket.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer as createHttpServer, get, type Server as HttpServer } from 'node:http';
import { connect, createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Fastify, { type FastifyInstance } from 'fastify';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { silentLogger } from '../../core/logger.ts';
import type { NetworkPolicy } from '../../core/schemas/sandbox.ts';
import { GatewayArrivals } from '../gateway/arrivals.ts';
import { AddressGuard } from './addresses.ts';
import { EgressConfigSchema } from './config.ts';
import { EgressCredentials } from './credentials.ts';
import { EgressProxy } from './proxy.ts';

// A little more than the kernel's buffers on the sandbox's socket hold (212 KiB by default), little
// enough that the host's end reaches the proxy while the sandbox reads nothing.
const size = 320 * 1024;
let directory: string;
let app: FastifyInstance;
let proxy: EgressProxy;
let host: Server;
let hostPort: number;
let authorization: string;
let hostClosed: Promise<void>;
let web: HttpServer;
let webPort: number;
let echo: HttpServer;
let echoPort: number;
let arrivals: GatewayArrivals;
/** Each sandbox's own socket: `sbx-a` may reach tail.test, `sbx-b` nothing, `sbx-c` another host. */
const sockets: Record<string, string> = {};
let credentials: EgressCredentials;

beforeAll(async () => {
  // Sends `size` bytes at once and ends.
  let closed!: () => void;
  hostClosed = new Promise((resolve) => {
    closed = resolve;
  });
  host = createServer((socket) => {
    socket.on('error', () => {});
    socket.on('close', closed);
    socket.end(Buffer.alloc(size, 0x62));
  });
  await new Promise<void>((resolve) => host.listen(0, '127.0.0.2', resolve));
  hostPort = (host.address() as { port: number }).port;
  web = createHttpServer((_request, response) => response.end(Buffer.alloc(size, 0x63)));
  await new Promise<void>((resolve) => web.listen(0, '127.0.0.2', resolve));
  webPort = (web.address() as { port: number }).port;
  // Answers with the Host it was sent: what a virtual-host server routes by.
  echo = createHttpServer((request, response) => response.end(`host=${request.headers.host ?? ''}`));
  await new Promise<void>((resolve) => echo.listen(0, '127.0.0.2', resolve));
  echoPort = (echo.address() as { port: number }).port;
  directory = await mkdtemp(join(tmpdir(), 'gym-egress-proxy-'));
  credentials = new EgressCredentials('test-token');
  arrivals = new GatewayArrivals({ directory: join(directory, 'gw'), logger: silentLogger });
  const policies: Record<string, NetworkPolicy> = {
    'sbx-a': { mode: 'allowlist', allowedHosts: ['tail.test:*'] },
    'sbx-b': { mode: 'none', allowedHosts: [] },
    'sbx-c': { mode: 'allowlist', allowedHosts: ['other.test:*'] },
  };
  for (const id of Object.keys(policies)) sockets[id] = await arrivals.open(id);
  proxy = new EgressProxy({
    arrivals,
    config: EgressConfigSchema.parse({
      allowedHosts: ['tail.test:*'],
      allowPrivateAddresses: ['127.0.0.0/8'],
    }),
    credentials,
    guard: new AddressGuard(['127.0.0.0/8']),
    policyOf: (id) => policies[id],
    resolver: async () => ['127.0.0.2'],
    logger: silentLogger,
  });
  app = Fastify({ logger: false });
  proxy.attach(app);
  await app.listen({ path: join(directory, 'gateway.sock') });
  arrivals.serve(app.server);
  authorization = `Basic ${Buffer.from(`sbx-a:${credentials.secretFor('sbx-a')}`).toString('base64')}`;
});

afterAll(async () => {
  arrivals?.closeAll();
  await app?.close();
  host?.close();
  web?.close();
  echo?.close();
  if (directory !== undefined) await rm(directory, { recursive: true, force: true });
});

it('a host that ends its side still delivers every byte to a sandbox that reads late', async () => {
  const socket = connect({ path: sockets['sbx-a']! });
  socket.write(
    `CONNECT tail.test:${hostPort} HTTP/1.1\r\nHost: tail.test:${hostPort}\r\nProxy-Authorization: ${authorization}\r\n\r\n`,
  );
  const chunks: Buffer[] = [];
  const ended = new Promise<void>((resolve, reject) => {
    socket.on('end', resolve);
    socket.on('error', reject);
  });
  // The answer, then nothing read until the host is done: the bytes wait in the socket's buffer
  // and the proxy's when the host's side closes.
  chunks.push(await new Promise<Buffer>((resolve) => socket.once('data', resolve)));
  socket.pause();
  await Promise.race([hostClosed, new Promise((resolve) => setTimeout(resolve, 2000))]);
  socket.on('data', (data: Buffer) => chunks.push(data));
  socket.resume();
  await ended;
  const received = Buffer.concat(chunks);
  expect(received.toString('latin1', 0, 12)).toBe('HTTP/1.1 200');
  expect(received.length - received.indexOf('\r\n\r\n') - 4).toBe(size);
  await expect.poll(() => proxy.log('sbx-a').attempts.at(-1)?.bytesDown).toBe(size);
}, 30_000);

it('a plain GET through the proxy delivers the whole body to a sandbox that reads slowly, and is logged', async () => {
  const body = await new Promise<Buffer>((resolve, reject) => {
    const request = get(
      {
        socketPath: sockets['sbx-a']!,
        path: `http://tail.test:${webPort}/`,
        headers: { host: `tail.test:${webPort}`, 'proxy-authorization': authorization },
      },
      (response) => {
        const chunks: Buffer[] = [];
        response.on('data', (data: Buffer) => {
          chunks.push(data);
          response.pause();
          setTimeout(() => response.resume(), 2);
        });
        response.on('end', () => resolve(Buffer.concat(chunks)));
        response.on('error', reject);
      },
    );
    request.on('error', reject);
  });
  expect(body.length).toBe(size);
  await expect
    .poll(() => proxy.log('sbx-a').attempts.find((attempt) => attempt.kind === 'http')?.verdict)
    .toBe('allowed');
}, 30_000);

/** One raw request on a socket (sbx-a's by default); the whole answer. */
async function rawRequest(text: string, path = sockets['sbx-a']!): Promise<string> {
  const socket = connect({ path });
  const chunks: Buffer[] = [];
  socket.on('data', (chunk: Buffer) => chunks.push(chunk));
  socket.write(text);
  await new Promise<void>((resolve, reject) => {
    socket.on('close', () => resolve());
    socket.on('error', reject);
  });
  return Buffer.concat(chunks).toString('latin1');
}

it("sends the URI's host on, never the Host the client wrote (RFC 7230 5.4)", async () => {
  const credential = `Proxy-Authorization: ${authorization}\r\n`;
  const cases: Array<{ target: string; headers: string; expected: string }> = [
    // Another virtual host at the allowed name's address, by the Host header alone.
    {
      target: `http://tail.test:${echoPort}/`,
      headers: 'Host: internal.other.test\r\n',
      expected: `tail.test:${echoPort}`,
    },
    // Case, a path and a query, and two Host headers (the first one is the one servers read).
    {
      target: `http://TAIL.test:${echoPort}/a?b=c`,
      headers: `Host: admin.test\r\nHost: tail.test:${echoPort}\r\n`,
      expected: `tail.test:${echoPort}`,
    },
    // A Host that names the same host on another port, and none at all (HTTP/1.0).
    {
      target: `http://tail.test:${echoPort}/`,
      headers: 'Host: tail.test:1\r\n',
      expected: `tail.test:${echoPort}`,
    },
    { target: `http://tail.test:${echoPort}/`, headers: '', expected: `tail.test:${echoPort}` },
  ];
  for (const { target, headers, expected } of cases) {
    const answer = await rawRequest(`GET ${target} HTTP/1.0\r\n${headers}${credential}\r\n`);
    expect(answer, target).toMatch(/^HTTP\/1\.[01] 200/);
    expect(answer.split('\r\n\r\n')[1], `${target} with ${JSON.stringify(headers)}`).toBe(`host=${expected}`);
  }
}, 30_000);

it("opens a sandbox's policy only to its own credential arriving through its own socket", async () => {
  const credentialOf = (id: string) =>
    `Basic ${Buffer.from(`${id}:${credentials.secretFor(id)}`).toString('base64')}`;
  const connectThrough = async (path: string, credential: string) =>
    (
      await rawRequest(
        `CONNECT tail.test:${echoPort} HTTP/1.1\r\nHost: tail.test:${echoPort}\r\nProxy-Authorization: ${credential}\r\n\r\n`,
        path,
      ).catch(() => '')
    ).slice(0, 12);
  const getThrough = async (path: string, credential: string) =>
    (
      await rawRequest(
        `GET http://tail.test:${echoPort}/ HTTP/1.0\r\nProxy-Authorization: ${credential}\r\n\r\n`,
        path,
      )
    ).slice(0, 12);
  const before = proxy.log('sbx-a').attempts.length;
  // A child (sbx-b, policy none; sbx-c, its own allow-list) holding its parent's credential, by
  // CONNECT and by plain HTTP, and the shared socket no relay uses: all refused.
  for (const child of ['sbx-b', 'sbx-c']) {
    expect(await getThrough(sockets[child]!, credentialOf('sbx-a')), child).toBe('HTTP/1.1 407');
    expect(await connectThrough(sockets[child]!, credentialOf('sbx-a')), child).toBe('HTTP/1.1 407');
  }
  expect(await getThrough(join(directory, 'gateway.sock'), credentialOf('sbx-a'))).toBe('HTTP/1.1 407');
  // Logged as the sandbox the bytes came from; the parent's log has none of it.
  expect(proxy.log('sbx-b').attempts.map((attempt) => [attempt.verdict, attempt.reason])).toEqual([
    ['refused', "another sandbox's credential"],
    ['refused', "another sandbox's credential"],
  ]);
  expect(proxy.log('sbx-a').attempts.length).toBe(before);
  // Its own credential is judged by its own policy; the parent's, through the parent's socket, opens.
  expect(await connectThrough(sockets['sbx-b']!, credentialOf('sbx-b'))).toBe('HTTP/1.1 403');
  expect(await getThrough(sockets['sbx-c']!, credentialOf('sbx-c'))).toBe('HTTP/1.1 403');
  expect(await getThrough(sockets['sbx-a']!, credentialOf('sbx-a'))).toBe('HTTP/1.1 200');
}, 30_000);
