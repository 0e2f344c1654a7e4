/**
 * The daemon's egress proxy: HTTP `CONNECT host:port` tunnels and plain `GET http://host/...`
 * requests from sandboxes, each decided by the asking sandbox's own policy and the operator's
 * cap. It is served on the gateway socket, so it reaches a sandbox wherever the gateway relay
 * does and no sandbox gets a route of its own; names are resolved here (the sandbox has no DNS)
 * and the address connected to is the address checked.
 *
 * Bounded per sandbox: open connections, bytes in its life, each connection's duration and idle
 * time. Bytes are piped with backpressure: a sandbox that reads slowly stalls its own upstream,
 * it never makes the daemon buffer.
 */
import { lookup } from 'node:dns/promises';
import {
  request as httpRequest,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type ServerResponse,
} from 'node:http';
import { connect, isIP, type OnReadOpts, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import type { Logger } from '../../core/logger.ts';
import type { NetworkPolicy } from '../../core/schemas/sandbox.ts';
import type { AddressGuard } from './addresses.ts';
import type { EgressConfig } from './config.ts';
import type { EgressCredentials } from './credentials.ts';
import { type EgressAttempt, EgressLog } from './log.ts';
import { normalHost, policyRefusal } from './policy.ts';

/** Resolves a host name to addresses; tests inject one that maps their names to 127.0.0.x. */
export type Resolver = (host: string) => Promise<string[]>;

export const systemResolver: Resolver = async (host) =>
  (await lookup(host, { all: true, verbatim: true })).map((entry) => entry.address);

export interface EgressProxyOptions {
  config: EgressConfig;
  credentials: EgressCredentials;
  /**
   * The sandbox a connection arrived through (its own gateway socket, `GatewayArrivals`); undefined
   * for one that came another way, which the proxy refuses.
   */
  arrivals: { sandboxOf(socket: object | undefined): string | undefined };
  guard: AddressGuard;
  /** A sandbox's current policy; undefined when there is no such sandbox (any more). */
  policyOf: (sandboxId: string) => NetworkPolicy | undefined;
  resolver?: Resolver;
  logger: Logger;
}

/**
 * What a tunnel reads from its host at once, and all it holds for a sandbox that reads slowly:
 * Node's own read size. 256 KiB measured a little faster in bench:egress (within its noise), at
 * four times the memory of every open tunnel.
 */
const RELAY_BUFFER_BYTES = 64 * 1024;

/** Headers that belong to one hop (and the proxy's own): never passed on. */
const HOP_HEADERS = new Set([
  'proxy-authorization',
  'proxy-connection',
  'connection',
  'keep-alive',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
]);

interface SandboxTraffic {
  open: Set<Attempt>;
  bytes: number;
}

type Target = { host: string; port: number };

/** One connection's life: counted against its sandbox from the first check to its end, logged once. */
class Attempt {
  readonly started = Date.now();
  readonly at = new Date().toISOString();
  bytesUp = 0;
  bytesDown = 0;
  address: string | undefined;
  isClosed = false;
  readonly #cleanups: (() => void)[] = [];
  readonly #finish: (attempt: Attempt, verdict: EgressAttempt['verdict'], reason: string | undefined) => void;

  readonly sandboxId: string;
  readonly target: Target;

  constructor(
    sandboxId: string,
    target: Target,
    finish: (attempt: Attempt, verdict: EgressAttempt['verdict'], reason: string | undefined) => void,
  ) {
    this.sandboxId = sandboxId;
    this.target = target;
    this.#finish = finish;
  }

  onClose(cleanup: () => void): void {
    if (this.isClosed) cleanup();
    else this.#cleanups.push(cleanup);
  }

  close(verdict: EgressAttempt['verdict'], reason?: string): void {
    if (this.isClosed) return;
    this.isClosed = true;
    for (const cleanup of this.#cleanups.splice(0)) cleanup();
    this.#finish(this, verdict, reason);
  }
}

function statusLine(status: number): string {
  return (
    {
      400: 'Bad Request',
      403: 'Forbidden',
      407: 'Proxy Authentication Required',
      429: 'Too Many Requests',
      502: 'Bad Gateway',
      504: 'Gateway Timeout',
    }[status] ?? 'Error'
  );
}

/** A refusal written on a raw socket (a CONNECT's), then the socket ends. */
function refuseRaw(socket: Duplex, status: number, reason: string): void {
  const body = `${reason}\n`;
  const authenticate = status === 407 ? 'Proxy-Authenticate: Basic realm="gym egress"\r\n' : '';
  socket.end(
    `HTTP/1.1 ${status} ${statusLine(status)}\r\n${authenticate}Content-Type: text/plain\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
  );
  socket.on('error', () => {});
  socket.resume();
}

function refuseResponse(response: ServerResponse, status: number, reason: string): void {
  response.shouldKeepAlive = false;
  response.writeHead(status, {
    'content-type': 'text/plain',
    ...(status === 407 ? { 'proxy-authenticate': 'Basic realm="gym egress"' } : {}),
  });
  response.end(`${reason}\n`);
}

/** `host:port` of a CONNECT (IPv6 in brackets); null when malformed. */
function parseAuthority(authority: string): Target | null {
  const match = /^(\[[0-9a-fA-F:.]+\]|[^:[\]/@\s]+):([0-9]{1,5})$/.exec(authority);
  if (match === null) return null;
  const port = Number(match[2]);
  if (port < 1 || port > 65535) return null;
  return { host: normalHost(match[1]!), port };
}

export class EgressProxy {
  readonly #config: EgressConfig;
  readonly #credentials: EgressCredentials;
  readonly #arrivals: EgressProxyOptions['arrivals'];
  readonly #guard: AddressGuard;
  readonly #policyOf: (sandboxId: string) => NetworkPolicy | undefined;
  readonly #resolver: Resolver;
  readonly #logger: Logger;
  readonly #log: EgressLog;
  readonly #traffic = new Map<string, SandboxTraffic>();

  constructor(options: EgressProxyOptions) {
    this.#config = options.config;
    this.#credentials = options.credentials;
    this.#arrivals = options.arrivals;
    this.#guard = options.guard;
    this.#policyOf = options.policyOf;
    this.#resolver = options.resolver ?? systemResolver;
    this.#logger = options.logger;
    this.#log = new EgressLog(options.config.logEntriesPerSandbox);
  }

  /**
   * Serves the proxy on the gateway's server: CONNECT through the http server's `connect` event
   * (which the model routes never see), absolute-URI requests taken over before routing. Every
   * other request goes on to the model routes unchanged.
   */
  attach(app: FastifyInstance): void {
    app.server.on('connect', (request: IncomingMessage, socket: Duplex, head: Buffer) =>
      this.#connect(request, socket, head),
    );
    app.addHook('onRequest', (request, reply, done) => {
      if (!/^http:\/\//i.test(request.raw.url ?? '')) {
        done();
        return;
      }
      reply.hijack();
      this.#forward(request.raw, reply.raw);
    });
    app.addHook('onClose', (_app, done) => {
      this.closeAll();
      done();
    });
  }

  /** The sandbox's attempts, oldest first (`dropped`: older ones past the log's bound). */
  log(sandboxId: string): { attempts: EgressAttempt[]; dropped: number } {
    return this.#log.read(sandboxId);
  }

  /** Ends every open connection of the sandbox (its policy changed, or it is gone). */
  cut(sandboxId: string, reason: string): void {
    for (const attempt of [...(this.#traffic.get(sandboxId)?.open ?? [])]) attempt.close('allowed', reason);
  }

  /** Cuts and forgets a destroyed sandbox (its log too). */
  forget(sandboxId: string): void {
    this.cut(sandboxId, 'the sandbox is gone');
    this.#traffic.delete(sandboxId);
    this.#log.forget(sandboxId);
  }

  closeAll(): void {
    for (const sandboxId of [...this.#traffic.keys()]) this.cut(sandboxId, 'the daemon is stopping');
  }

  /** Environment for the sandbox's commands that points them at the proxy (see EgressCredentials). */
  environment(sandboxId: string, gatewayUrl: string): Record<string, string> {
    return this.#credentials.environment(sandboxId, gatewayUrl);
  }

  #traffics(sandboxId: string): SandboxTraffic {
    let traffic = this.#traffic.get(sandboxId);
    if (traffic === undefined) {
      traffic = { open: new Set(), bytes: 0 };
      this.#traffic.set(sandboxId, traffic);
    }
    return traffic;
  }

  #record(
    sandboxId: string,
    kind: EgressAttempt['kind'],
    target: Target,
    verdict: EgressAttempt['verdict'],
    details: Partial<EgressAttempt> = {},
  ): void {
    this.#log.add(sandboxId, {
      at: new Date().toISOString(),
      kind,
      host: target.host,
      port: target.port,
      verdict,
      bytesUp: 0,
      bytesDown: 0,
      durationMs: 0,
      ...details,
    });
  }

  /**
   * Authenticates, checks policy and limits, and reserves a slot; the refusal (status, reason)
   * otherwise. Refusals of a known sandbox are logged.
   */
  #admit(
    request: IncomingMessage,
    kind: EgressAttempt['kind'],
    target: Target | null,
  ): { attempt: Attempt } | { status: number; reason: string } {
    // Which sandbox asks is where the connection arrived (its own relay and socket); the credential
    // must be that sandbox's too. A credential another sandbox holds (a fork child's copy of its
    // parent's HTTP_PROXY, one saved in a snapshot) opens nothing, and is logged as the asker's.
    const arrivedFrom = this.#arrivals.sandboxOf(request.socket);
    const credentialOf = this.#credentials.sandboxOf(request.headers['proxy-authorization']);
    const sandboxId = credentialOf !== undefined && credentialOf === arrivedFrom ? arrivedFrom : undefined;
    const policy = sandboxId === undefined ? undefined : this.#policyOf(sandboxId);
    if (sandboxId === undefined || policy === undefined) {
      const reason =
        arrivedFrom === undefined
          ? 'the egress proxy serves sandboxes through their own relay only'
          : "the egress proxy needs this sandbox's own credential (HTTP_PROXY)";
      if (arrivedFrom !== undefined && this.#policyOf(arrivedFrom) !== undefined) {
        this.#record(
          arrivedFrom,
          kind,
          target ?? { host: String(request.url).slice(0, 256), port: 0 },
          'refused',
          {
            reason: credentialOf === undefined ? 'no valid credential' : "another sandbox's credential",
          },
        );
      }
      this.#logger.debug(
        { kind, target, arrivedFrom },
        'egress proxy: a request without its sandbox credential',
      );
      return { status: 407, reason };
    }
    if (target === null) {
      this.#record(sandboxId, kind, { host: String(request.url).slice(0, 256), port: 0 }, 'refused', {
        reason: 'malformed target',
      });
      return { status: 400, reason: 'malformed target: CONNECT host:port, or an http:// URL' };
    }
    const refusal = policyRefusal(policy, target.host, target.port);
    const traffic = this.#traffics(sandboxId);
    const limit =
      refusal ??
      (traffic.open.size >= this.#config.maxConnectionsPerSandbox
        ? `the sandbox has ${traffic.open.size} proxied connections open, the most it may (egress.maxConnectionsPerSandbox)`
        : traffic.bytes >= this.#config.maxBytesPerSandbox
          ? 'the sandbox moved all the bytes it may (egress.maxBytesPerSandbox)'
          : null);
    if (limit !== null) {
      this.#record(sandboxId, kind, target, 'refused', { reason: limit });
      return { status: refusal === null ? 429 : 403, reason: limit };
    }
    const attempt = new Attempt(sandboxId, target, (done, verdict, reason) => {
      traffic.open.delete(done);
      this.#log.add(sandboxId, {
        at: done.at,
        kind,
        host: target.host,
        port: target.port,
        ...(done.address === undefined ? {} : { address: done.address }),
        verdict,
        ...(reason === undefined ? {} : { reason }),
        bytesUp: done.bytesUp,
        bytesDown: done.bytesDown,
        durationMs: Date.now() - done.started,
      });
    });
    traffic.open.add(attempt);
    const lifetime = setTimeout(
      () => attempt.close('allowed', 'the connection lasted as long as it may (egress.maxConnectionSeconds)'),
      this.#config.maxConnectionSeconds * 1000,
    );
    attempt.onClose(() => clearTimeout(lifetime));
    return { attempt };
  }

  /** The first resolved address the guard allows, or the refusal. */
  async #resolve(target: Target): Promise<{ address: string } | { reason: string }> {
    let addresses: string[];
    try {
      addresses = isIP(target.host) === 0 ? await this.#resolver(target.host) : [target.host];
    } catch (error) {
      return {
        reason: `cannot resolve ${target.host}: ${(error as NodeJS.ErrnoException).code ?? String(error)}`,
      };
    }
    let firstRefusal = `${target.host} has no address`;
    for (const address of addresses) {
      const refusal = this.#guard.refusal(address, target.port);
      if (refusal === null) return { address };
      if (firstRefusal.endsWith('has no address')) firstRefusal = refusal;
    }
    return { reason: firstRefusal };
  }

  /** Connects to the checked address (never the name again), within the connect timeout. */
  async #open(
    attempt: Attempt,
    onread?: OnReadOpts,
  ): Promise<{ upstream: Socket } | { status: number; reason: string }> {
    const timeout = new Promise<{ status: number; reason: string }>((resolve) => {
      const timer = setTimeout(
        () => resolve({ status: 504, reason: `no connection to ${attempt.target.host} in time` }),
        this.#config.connectTimeoutMs,
      );
      attempt.onClose(() => clearTimeout(timer));
    });
    const opened = (async () => {
      const resolved = await this.#resolve(attempt.target);
      if ('reason' in resolved) return { status: 403, reason: resolved.reason };
      attempt.address = resolved.address;
      if (attempt.isClosed) return { status: 403, reason: 'cut' };
      const upstream = connect({
        host: resolved.address,
        port: attempt.target.port,
        ...(onread === undefined ? {} : { onread }),
      });
      // Nothing is read before the caller is ready to pass it on.
      if (onread !== undefined) upstream.pause();
      attempt.onClose(() => upstream.destroy());
      return await new Promise<{ upstream: Socket } | { status: number; reason: string }>((resolve) => {
        upstream.once('connect', () => resolve({ upstream }));
        upstream.once('error', (error: NodeJS.ErrnoException) =>
          resolve({
            status: 502,
            reason: `cannot connect to ${attempt.target.host}: ${error.code ?? error.message}`,
          }),
        );
      });
    })();
    return Promise.race([opened, timeout]);
  }

  /** Counts bytes against the sandbox's budget, and ends the connection when it is spent. */
  #count(attempt: Attempt, direction: 'up' | 'down', length: number): void {
    const traffic = this.#traffics(attempt.sandboxId);
    traffic.bytes += length;
    if (direction === 'up') attempt.bytesUp += length;
    else attempt.bytesDown += length;
    if (traffic.bytes > this.#config.maxBytesPerSandbox) {
      attempt.close('allowed', 'the sandbox moved all the bytes it may (egress.maxBytesPerSandbox)');
    }
  }

  #connect(request: IncomingMessage, socket: Duplex, head: Buffer): void {
    socket.on('error', () => {});
    const admitted = this.#admit(request, 'connect', parseAuthority(request.url ?? ''));
    if ('status' in admitted) {
      refuseRaw(socket, admitted.status, admitted.reason);
      return;
    }
    const { attempt } = admitted;
    attempt.onClose(() => socket.destroy());
    socket.once('close', () => attempt.close('allowed'));
    // The host's bytes are read into one buffer of this tunnel's, and written on from it: no
    // allocation per chunk, and at most that buffer held for a sandbox that reads slowly (the next
    // read waits until the sandbox's socket has taken all of the last one).
    const sandboxSocket = socket as Socket;
    let upstreamOf: Socket | undefined;
    const onread: OnReadOpts = {
      buffer: Buffer.allocUnsafe(RELAY_BUFFER_BYTES),
      callback: (length, buffer) => {
        this.#count(attempt, 'down', length);
        if (attempt.isClosed) return false;
        let waiting = false;
        sandboxSocket.write(buffer.subarray(0, length), () => {
          if (waiting) upstreamOf?.resume();
        });
        // Written at once (the kernel took it all): the buffer is free for the next read.
        if (sandboxSocket.writableLength === 0) return true;
        waiting = true;
        upstreamOf?.pause();
        return false;
      },
    };
    void this.#open(attempt, onread).then((opened) => {
      if (attempt.isClosed) return;
      if ('status' in opened) {
        refuseRaw(socket, opened.status, opened.reason);
        attempt.close('refused', opened.reason);
        return;
      }
      const { upstream } = opened;
      upstream.setTimeout(this.#config.idleTimeoutSeconds * 1000, () =>
        attempt.close('allowed', 'idle for as long as it may (egress.idleTimeoutSeconds)'),
      );
      // A host that ends its side has its last bytes on the way to the sandbox: the pipe ends the
      // sandbox's socket once they are written, and that (finish) ends the attempt. Destroying it
      // at the host's close would drop whatever the sandbox had not read yet. A sandbox that never
      // takes that tail is cut after the idle time; a host that fails is cut at once.
      upstream.once('close', (hadError: boolean) => {
        if (hadError || socket.writableFinished) {
          attempt.close('allowed');
          return;
        }
        socket.once('finish', () => attempt.close('allowed'));
        const grace = setTimeout(
          () => attempt.close('allowed', 'idle for as long as it may (egress.idleTimeoutSeconds)'),
          this.#config.idleTimeoutSeconds * 1000,
        );
        attempt.onClose(() => clearTimeout(grace));
      });
      socket.write('HTTP/1.1 200 Connection Established\r\n\r\n');
      if (head.length > 0) {
        this.#count(attempt, 'up', head.length);
        upstream.write(head);
      }
      socket.on('data', (chunk: Buffer) => this.#count(attempt, 'up', chunk.length));
      socket.pipe(upstream);
      upstream.once('end', () => socket.end());
      upstreamOf = upstream;
      upstream.resume();
    });
  }

  #forward(request: IncomingMessage, response: ServerResponse): void {
    let url: URL | null = null;
    try {
      url = new URL(request.url ?? '');
    } catch {}
    const target =
      url === null || url.protocol !== 'http:' || url.username !== '' || url.password !== ''
        ? null
        : { host: normalHost(url.hostname), port: url.port === '' ? 80 : Number(url.port) };
    const admitted = this.#admit(request, 'http', target);
    if ('status' in admitted) {
      request.resume();
      refuseResponse(response, admitted.status, admitted.reason);
      return;
    }
    const { attempt } = admitted;
    attempt.onClose(() => response.destroy());
    response.once('close', () => attempt.close('allowed'));
    void this.#open(attempt).then((opened) => {
      if (attempt.isClosed) return;
      if ('status' in opened) {
        request.resume();
        refuseResponse(response, opened.status, opened.reason);
        attempt.close('refused', opened.reason);
        return;
      }
      const headers: IncomingHttpHeaders = {};
      for (const [name, value] of Object.entries(request.headers)) {
        if (!HOP_HEADERS.has(name)) headers[name] = value;
      }
      const upstreamRequest = httpRequest({
        createConnection: () => opened.upstream,
        method: request.method,
        path: `${url!.pathname}${url!.search}`,
        // The URI's authority, never the client's Host (RFC 7230 5.4): the policy judged the URI's
        // host, and a Host of the client's choice would reach any virtual host at its address.
        headers: { ...headers, host: url!.host, connection: 'close' },
        setHost: false,
      });
      upstreamRequest.setTimeout(this.#config.idleTimeoutSeconds * 1000, () =>
        attempt.close('allowed', 'idle for as long as it may (egress.idleTimeoutSeconds)'),
      );
      upstreamRequest.on('error', (error: NodeJS.ErrnoException) => {
        if (!response.headersSent)
          refuseResponse(response, 502, `upstream failed: ${error.code ?? error.message}`);
        attempt.close('allowed', `upstream failed: ${error.code ?? error.message}`);
      });
      upstreamRequest.on('response', (upstreamResponse) => {
        const passed: Record<string, string | string[]> = {};
        for (const [name, value] of Object.entries(upstreamResponse.headers)) {
          if (!HOP_HEADERS.has(name) && value !== undefined) passed[name] = value;
        }
        response.shouldKeepAlive = false;
        response.writeHead(upstreamResponse.statusCode ?? 502, passed);
        upstreamResponse.on('data', (chunk: Buffer) => this.#count(attempt, 'down', chunk.length));
        // The response's own close (after its last byte is written) ends the attempt: closing
        // it at the host's end would destroy the response with its tail still unwritten.
        upstreamResponse.pipe(response);
      });
      request.on('data', (chunk: Buffer) => this.#count(attempt, 'up', chunk.length));
      request.pipe(upstreamRequest);
    });
  }
}
