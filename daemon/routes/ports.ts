/**
 * A sandbox's declared ports, for the caller: `GET /v1/sandboxes/{id}/ports/{port}` (the token, or
 * a scoped credential with `endpoints`) gives the proxy path and the sandbox's port key; requests
 * under `/v1/sandboxes/{id}/ports/{port}/...` with that key in `x-gym-port-key` go to the
 * service on 127.0.0.1:{port} in the sandbox, through its port relay, and so do WebSocket
 * upgrades there.
 *
 * Why a path on the daemon rather than a loopback listener per port: it is reachable wherever the
 * daemon is (a unix socket, a remote bind, the same TLS front), it costs no port on the host, and
 * it is one route whose key is checked before anything reaches the sandbox. The key grants that
 * sandbox's declared ports alone: never the API (the token is neither asked nor passed on), nor
 * another sandbox. The proxied answer is the sandbox's, on the daemon's origin, so it goes out with
 * `content-security-policy: sandbox`: a page the service serves runs in an opaque origin and can
 * read nothing of the daemon's (the /ui page) in a browser.
 */
import type { IncomingHttpHeaders, IncomingMessage, OutgoingHttpHeaders } from 'node:http';
import { request as httpRequest } from 'node:http';
import type { Duplex } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import { GymError } from '../../core/errors.ts';
import { SANDBOX_ID_PATTERN } from '../../core/ids.ts';
import { PortEndpointSchema } from '../../core/schemas/service.ts';
import { toApiError } from '../errors.ts';
import { emptyAnswer, errorAnswers, jsonAnswer } from '../openapi.ts';
import { PORT_KEY_HEADER, type SandboxPorts } from '../sandboxes/ports.ts';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** This route checks the sandbox's port key itself (`routes/ports.ts`). */
    portKey?: boolean;
  }
}

const PortParamsSchema = z.object({ id: z.string(), port: z.coerce.number().int().min(1).max(65_535) });
const PROXY_PATTERN = /^\/v1\/sandboxes\/([^/?]+)\/ports\/([0-9]{1,5})(\/[^?]*)?(\?.*)?$/;
/** Hop-by-hop headers (RFC 9110 7.6.1) and ours: never passed through. */
const HOP_HEADERS = new Set([
  'connection',
  'keep-alive',
  'proxy-authenticate',
  'proxy-authorization',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  PORT_KEY_HEADER,
]);
const ANSWER_HEADERS = { 'content-security-policy': 'sandbox', 'x-content-type-options': 'nosniff' };

function parsePort(raw: unknown): { id: string; port: number } {
  const parsed = PortParamsSchema.safeParse(raw);
  if (!parsed.success) throw new GymError('VALIDATION_FAILED', 'a port is a number from 1 to 65535');
  if (!SANDBOX_ID_PATTERN.test(parsed.data.id))
    throw new GymError('SANDBOX_NOT_FOUND', `sandbox ${parsed.data.id} does not exist (not a sandbox id)`);
  return parsed.data;
}

/** Whether an `Authorization` value carries a credential of this daemon (its token, a scoped one). */
export type IsDaemonCredential = (authorization: string) => boolean;

function upstreamHeaders(
  headers: IncomingHttpHeaders,
  port: number,
  prefix: string,
  isDaemonCredential: IsDaemonCredential,
): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {};
  for (const [name, value] of Object.entries(headers))
    if (value !== undefined && !HOP_HEADERS.has(name)) out[name] = value;
  // A client that sends its daemon credential on every request must not hand it to the service:
  // the service is the sandbox's, and the agent reads what it is sent.
  if (typeof out.authorization === 'string' && isDaemonCredential(out.authorization))
    delete out.authorization;
  out.host = `localhost:${port}`;
  out['x-forwarded-prefix'] = prefix;
  return out;
}

function answerHeaders(response: IncomingMessage): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {};
  for (const [name, value] of Object.entries(response.headers))
    if (value !== undefined && !HOP_HEADERS.has(name) && !(name in ANSWER_HEADERS)) out[name] = value;
  return { ...out, ...ANSWER_HEADERS };
}

/** The key check, for the route and for upgrades alike. @throws GymError `UNAUTHORIZED`. */
function requireKey(ports: SandboxPorts, id: string, headers: IncomingHttpHeaders): void {
  const presented = headers[PORT_KEY_HEADER];
  if (!ports.isKeyOf(id, typeof presented === 'string' ? presented : undefined))
    throw new GymError(
      'UNAUTHORIZED',
      presented === undefined
        ? `missing ${PORT_KEY_HEADER} (GET /v1/sandboxes/${id}/ports/{port} gives it)`
        : `wrong ${PORT_KEY_HEADER} for sandbox ${id}`,
      { details: { sandboxId: id } },
    );
}

function writeError(socket: Duplex, error: unknown): void {
  const apiError = toApiError(error);
  const body = JSON.stringify({
    error: { code: apiError.code, message: apiError.message, details: apiError.details ?? {} },
  });
  socket.end(
    `HTTP/1.1 ${apiError.httpStatus} ${apiError.code}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
  );
}

/** Head of a raw HTTP/1.1 answer, from a parsed one (for an upgrade's socket). */
function rawHead(response: IncomingMessage, extra: Record<string, string> = {}): string {
  const lines = [`HTTP/1.1 ${response.statusCode} ${response.statusMessage ?? ''}`];
  const isUpgrade = response.statusCode === 101;
  for (let index = 0; index < response.rawHeaders.length; index += 2) {
    const name = response.rawHeaders[index] as string;
    const lower = name.toLowerCase();
    // A refused upgrade's body goes out decoded, ended by the close: no length, no chunks.
    if (lower in extra || (!isUpgrade && (HOP_HEADERS.has(lower) || lower === 'content-length'))) continue;
    lines.push(`${name}: ${response.rawHeaders[index + 1]}`);
  }
  for (const [name, value] of Object.entries(extra)) lines.push(`${name}: ${value}`);
  return `${lines.join('\r\n')}\r\n\r\n`;
}

export function registerPortRoutes(
  app: FastifyInstance,
  ports: SandboxPorts,
  isDaemonCredential: IsDaemonCredential,
): void {
  app.get(
    '/v1/sandboxes/:id/ports/:port',
    {
      config: { scoped: 'endpoints' as const },
      schema: {
        summary:
          "a declared port's proxy path on this daemon and the header (the sandbox's port key) its requests need",
        response: {
          200: jsonAnswer('where the port is reached', PortEndpointSchema),
          ...errorAnswers(400, 404),
        },
      },
    },
    async (request) => {
      const { id, port } = parsePort(request.params);
      return { port, ...ports.endpoint(id, port) };
    },
  );

  // An encapsulated scope: its bodies stay unread (fastify parses none), so they stream to the service.
  void app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', (_request, _payload, done) => done(null));
    scope.route({
      method: ['DELETE', 'GET', 'PATCH', 'POST', 'PUT', 'OPTIONS'],
      url: '/v1/sandboxes/:id/ports/:port/*',
      config: { auth: 'port-key', portKey: true },
      schema: {
        summary:
          "a request to the service on that port in the sandbox, with the sandbox's port key in x-gym-port-key (not the token); WebSocket upgrades too",
        security: [{ portKey: [] }],
        response: {
          200: emptyAnswer("the service's answer, as it gave it"),
          ...errorAnswers(400, 401, 404, 502),
        },
      },
      handler: async (request, reply) => {
        // The key first: nothing about the sandbox or the port is said to a caller without it.
        requireKey(ports, String((request.params as { id?: unknown }).id), request.headers);
        const { id, port } = parsePort(request.params);
        const connection = await ports.connect(id, port);
        const rest = (request.params as { '*': string })['*'];
        const query = request.url.includes('?') ? request.url.slice(request.url.indexOf('?')) : '';
        const prefix = `/v1/sandboxes/${id}/ports/${port}`;
        reply.hijack();
        const upstream = httpRequest({
          method: request.method,
          path: `/${rest}${query}`,
          headers: upstreamHeaders(request.headers, port, prefix, isDaemonCredential),
          createConnection: () => connection as never,
        });
        upstream.on('response', (answer) => {
          reply.raw.writeHead(answer.statusCode ?? 502, answerHeaders(answer));
          answer.pipe(reply.raw);
          answer.on('error', () => reply.raw.destroy());
        });
        upstream.on('error', (error) => {
          if (reply.raw.headersSent) reply.raw.destroy();
          else writeError(reply.raw.socket as Duplex, refusedToApi(error, port));
        });
        reply.raw.on('close', () => {
          if (!reply.raw.writableFinished) connection.destroy();
        });
        request.raw.pipe(upstream);
      },
    });
  });

  // WebSocket (and any other) upgrades: fastify routes none, so this is the route for them, and
  // it checks the key before the sandbox sees a byte. Anything else that asks to upgrade is refused.
  app.server.on('upgrade', (request: IncomingMessage, socket: Duplex, head: Buffer) => {
    socket.on('error', () => {});
    void proxyUpgrade(ports, isDaemonCredential, request, socket, head).catch((error: unknown) =>
      writeError(socket, error),
    );
  });
}

function refusedToApi(error: Error, port: number): GymError {
  return new GymError(
    'PROVIDER_ERROR',
    (error as { code?: string }).code === 'ECONNREFUSED'
      ? `nothing accepts connections on port ${port} in the sandbox`
      : `the service on port ${port} did not answer: ${error.message}`,
    { details: { port } },
  );
}

async function proxyUpgrade(
  ports: SandboxPorts,
  isDaemonCredential: IsDaemonCredential,
  request: IncomingMessage,
  socket: Duplex,
  head: Buffer,
): Promise<void> {
  const match = PROXY_PATTERN.exec(request.url ?? '');
  if (match === null) throw new GymError('ROUTE_NOT_FOUND', 'no route takes an upgrade here');
  const rawId = decodeURIComponent(match[1] as string);
  requireKey(ports, rawId, request.headers);
  const { id, port } = parsePort({ id: rawId, port: match[2] });
  const connection = await ports.connect(id, port);
  socket.on('close', () => connection.destroy());
  const headers = upstreamHeaders(
    request.headers,
    port,
    `/v1/sandboxes/${id}/ports/${port}`,
    isDaemonCredential,
  );
  headers.connection = 'Upgrade';
  if (request.headers.upgrade !== undefined) headers.upgrade = request.headers.upgrade;
  const upstream = httpRequest({
    method: request.method,
    path: `${match[3] ?? '/'}${match[4] ?? ''}`,
    headers,
    createConnection: () => connection as never,
  });
  upstream.on('upgrade', (answer, upstreamSocket, upstreamHead) => {
    socket.write(rawHead(answer));
    if (upstreamHead.length > 0) socket.write(upstreamHead);
    if (head.length > 0) upstreamSocket.write(head);
    upstreamSocket.pipe(socket).on('error', () => {});
    socket.pipe(upstreamSocket).on('error', () => {});
    upstreamSocket.on('error', () => socket.destroy());
  });
  upstream.on('response', (answer) => {
    // The service would not upgrade: its answer, then the end.
    socket.write(rawHead(answer, { connection: 'close', ...ANSWER_HEADERS }));
    answer.pipe(socket);
  });
  upstream.on('error', (error) => writeError(socket, refusedToApi(error, port)));
  upstream.end();
}
