/**
 * Builds the HTTP API as a fastify app that is not yet listening (tests call `inject()`).
 * Validation is zod's (the same schemas make the OpenAPI document and the client); errors are
 * `{"error": {"code", "message", "details"}}` with the code's own HTTP status.
 */
import Fastify, {
  type FastifyBaseLogger,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
  LogController,
} from 'fastify';
import { z } from 'zod';
import { GymError } from '../core/errors.ts';
import { HealthSchema } from '../core/schemas/api.ts';
import { type AccessGrants, isScopedCredential } from './access/grants.ts';
import { toApiError } from './errors.ts';
import type { ModelGateway } from './gateway/gateway.ts';
import { registerIdempotency } from './idempotency/http.ts';
import type { IdempotencyStore } from './idempotency/store.ts';
import { tokenMatches } from './identity.ts';
import type { ImageService } from './images.ts';
import type { DaemonMetrics } from './metrics.ts';
import { contentAnswer, jsonAnswer, openApiDocument, registerOpenApi, useRouteSchemas } from './openapi.ts';
import type { PoolManager } from './pools/pool-manager.ts';
import { registerAccessRoutes } from './routes/access.ts';
import { registerGatewayAdminRoutes, registerGatewayModelRoutes } from './routes/gateway.ts';
import { registerImageRoutes } from './routes/images.ts';
import { registerPoolRoutes } from './routes/pools.ts';
import { registerPortRoutes } from './routes/ports.ts';
import { registerPtyRoutes } from './routes/ptys.ts';
import { registerSandboxRoutes } from './routes/sandboxes.ts';
import { registerServiceRoutes } from './routes/services.ts';
import { registerUiRoutes } from './routes/ui.ts';
import type { SandboxManager } from './sandbox-manager.ts';
import type { DaemonTracing } from './telemetry/daemon-tracing.ts';
import { registerRequestSpans } from './telemetry/request-spans.ts';

/** JSON bodies other than exec's are specs and small requests. */
const DEFAULT_BODY_LIMIT_BYTES = 16 * 1024 * 1024;

export interface ServerOptions {
  manager: SandboxManager;
  pools: PoolManager;
  gateway: ModelGateway;
  images: ImageService;
  metrics: DaemonMetrics;
  token: string;
  /** Scoped credentials: what each lends, checked on the route that runs. */
  access: AccessGrants;
  /** What requests sent with an `Idempotency-Key` answered (daemon/idempotency/). */
  idempotency: IdempotencyStore;
  daemonId: string;
  version: string;
  /** The largest model request the gateway accepts. */
  maxModelRequestBytes: number;
  /** A pino logger; silent when absent. */
  logger?: FastifyBaseLogger;
  /** Spans of sandbox requests and model calls (docs/tracing.md); absent or off: none. */
  tracing?: DaemonTracing;
}

function sendApiError(
  metrics: DaemonMetrics,
  error: unknown,
  request: FastifyRequest,
  reply: FastifyReply,
): void {
  const apiError = toApiError(error);
  metrics.errors.inc({ code: apiError.code });
  if (apiError.httpStatus >= 500)
    request.log.error(
      { code: apiError.code, error: String(apiError.cause ?? apiError), url: request.url },
      apiError.message,
    );
  reply.status(apiError.httpStatus).type('application/json').send(apiError.toJSON());
}

/**
 * Errors the router raises before any route or hook runs (a malformed escape in the path, a path
 * parameter over the router's length limit) in our shape too, rather than fastify's own.
 */
function frameworkErrors(metrics: DaemonMetrics) {
  return (error: unknown, request: FastifyRequest, reply: FastifyReply) =>
    sendApiError(metrics, error, request, reply);
}

/** Our error shape for everything a route throws, and for unknown routes. */
function installErrorHandlers(app: FastifyInstance, metrics: DaemonMetrics): void {
  app.setErrorHandler((error, request, reply) => sendApiError(metrics, error, request, reply));

  app.setNotFoundHandler((request, reply) => {
    const error = new GymError(
      'ROUTE_NOT_FOUND',
      `no route ${request.method} ${request.url.split(/[?#]/)[0]}; see GET /openapi.json`,
    );
    metrics.errors.inc({ code: error.code });
    reply.status(404).send(error.toJSON());
  });
}

/**
 * A JSON body that is empty (or only white space) is no body: the route then sees none, as it
 * would without the header. Clients that set `content-type: application/json` on every request
 * send it on bodiless DELETEs and POSTs too, and fastify's own parser refused those with 400
 * before any route ran (a `DELETE /v1/snapshots/{id}` kept the snapshot). Anything else is parsed
 * by fastify's parser, with its guards against prototype poisoning.
 */
function acceptEmptyJson(app: FastifyInstance): void {
  const parseJson = app.getDefaultJsonParser('error', 'error');
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    if ((body as string).trim() === '') done(null, undefined);
    else parseJson(request, body as string, done);
  });
}

function presentedBearer(request: FastifyRequest): string {
  const header = request.headers.authorization ?? '';
  return header.startsWith('Bearer ') ? header.slice('Bearer '.length) : '';
}

function hasToken(request: FastifyRequest, token: string): boolean {
  const presented = presentedBearer(request);
  return presented !== '' && tokenMatches(presented, token);
}

function unauthorized(request: FastifyRequest, reply: FastifyReply, message: string): GymError {
  reply.header('www-authenticate', 'Bearer');
  return new GymError(
    'UNAUTHORIZED',
    (request.headers.authorization ?? '') === ''
      ? 'missing bearer token (see the token file in the state directory)'
      : message,
  );
}

export async function buildServer(options: ServerOptions): Promise<FastifyInstance> {
  const app = Fastify({
    ...(options.logger === undefined ? { logger: false } : { loggerInstance: options.logger }),
    // Request lines go to debug in our onResponse hook; at info they would swamp the log at thousands of execs a second.
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: DEFAULT_BODY_LIMIT_BYTES,
    // Keep-alive connections of idle clients must not hold a shutdown open.
    forceCloseConnections: 'idle',
    return503OnClosing: true,
    frameworkErrors: frameworkErrors(options.metrics),
  });

  // Files and archives stream straight from the socket: leave the body unread for the route.
  app.addContentTypeParser(['application/octet-stream', 'application/x-tar'], (_request, _payload, done) =>
    done(null),
  );
  app.addContentTypeParser('*', (_request, _payload, done) => done(null));
  acceptEmptyJson(app);

  // Who may call is decided on the route the router chose (its config), never on the raw URL:
  // a request no route matches needs the token too. Model calls are checked by their own route
  // against the rollout's key, before their body is read. A scoped credential passes only a route
  // whose `config.scoped` names a right it holds, for a sandbox it names (default deny).
  app.addHook('onRequest', async (request, reply) => {
    const auth = request.routeOptions.config.auth ?? 'token';
    // The /ui page's routes check their own session cookie (routes/ui.ts); it grants nothing else.
    // A declared port's proxy checks the sandbox's port key itself (routes/ports.ts).
    if (auth === 'rollout-key' || auth === 'optional-token' || auth === 'ui-session' || auth === 'port-key')
      return;
    if (hasToken(request, options.token)) return;
    const presented = presentedBearer(request);
    if (!isScopedCredential(presented)) throw unauthorized(request, reply, 'wrong bearer token');
    const grant = options.access.authenticate(presented);
    if (grant === undefined)
      throw unauthorized(
        request,
        reply,
        'scoped credential not valid (unknown, revoked, expired, or its sandboxes are gone)',
      );
    options.access.authorize(
      grant,
      request.routeOptions.config.scoped,
      (request.params as { id?: string } | undefined)?.id,
    );
    request.accessGrant = grant;
  });

  app.addHook('onResponse', async (request, reply) => {
    request.log.debug(
      {
        method: request.method,
        url: request.url.split('?')[0],
        status: reply.statusCode,
        ms: reply.elapsedTime,
      },
      'request',
    );
  });

  installErrorHandlers(app, options.metrics);
  registerIdempotency(app, options.idempotency);
  // After the token check: only a holder's of the token or a scoped credential traceparent is read.
  registerRequestSpans(app, options.tracing, {
    providerOf: (id) => {
      try {
        return options.manager.lifecycle.get(id).provider;
      } catch {
        return undefined;
      }
    },
  });

  // Liveness for anyone who can reach the port; versions, ids and provider details only with the token.
  // Before any route: the document lists the routes as they are registered.
  await registerOpenApi(app, options.version);
  app.get(
    '/healthz',
    {
      config: { auth: 'optional-token' },
      schema: {
        summary: 'liveness, and with the token the version, the daemon id and provider health',
        security: [],
        response: { 200: jsonAnswer('health', HealthSchema) },
      },
    },
    async (request) => {
      const providers: Record<string, { ok: boolean; message: string }> = {};
      await Promise.all(
        [...options.manager.providers].map(async ([name, provider]) => {
          const health = await provider.health();
          providers[name] = { ok: health.ok, message: health.message };
        }),
      );
      const ok = Object.values(providers).every((health) => health.ok);
      if (!hasToken(request, options.token)) return { ok };
      return {
        ok,
        version: options.version,
        daemonId: options.daemonId,
        providers,
      };
    },
  );

  app.get(
    '/metrics',
    {
      schema: {
        summary: 'Prometheus metrics',
        response: { 200: contentAnswer('Prometheus text format', { 'text/plain': z.string() }) },
      },
    },
    async (_request, reply) => reply.type('text/plain; version=0.0.4').send(await options.metrics.text()),
  );
  app.get(
    '/openapi.json',
    {
      schema: {
        summary: 'this document, derived from the routes',
        response: { 200: jsonAnswer('OpenAPI 3.1', z.record(z.string(), z.unknown())) },
      },
    },
    async () => openApiDocument(app),
  );
  registerSandboxRoutes(app, options.manager, options.pools, options.idempotency);
  registerPortRoutes(app, options.manager.ports, (authorization) => {
    const presented = authorization.startsWith('Bearer ')
      ? authorization.slice('Bearer '.length)
      : authorization;
    return tokenMatches(presented, options.token) || isScopedCredential(presented);
  });
  registerServiceRoutes(app, options.manager.lifecycle, options.manager.services);
  registerPtyRoutes(app, options.manager.ptys);
  registerAccessRoutes(app, options.access);
  registerPoolRoutes(app, options.pools);
  registerImageRoutes(app, options.images);
  registerGatewayAdminRoutes(app, options.gateway);
  registerGatewayModelRoutes(app, options.gateway, {
    maxRequestBytes: options.maxModelRequestBytes,
    ...(options.tracing === undefined ? {} : { tracing: options.tracing }),
  });
  registerUiRoutes(app, options.manager.lifecycle, options.pools);
  return app;
}

export interface GatewayServerOptions {
  gateway: ModelGateway;
  metrics: DaemonMetrics;
  maxModelRequestBytes: number;
  logger?: FastifyBaseLogger;
  tracing?: DaemonTracing;
  /** The sandbox whose own gateway socket a connection came through (`gateway/arrivals.ts`). */
  arrivedFrom?: (socket: object) => string | undefined;
}

/**
 * The server that sandboxes reach (through their relay): the model routes and nothing else, each
 * checked against its rollout's key. No daemon API, no token, no health or metrics.
 */
export async function buildGatewayServer(options: GatewayServerOptions): Promise<FastifyInstance> {
  const app = Fastify({
    ...(options.logger === undefined ? { logger: false } : { loggerInstance: options.logger }),
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: options.maxModelRequestBytes,
    forceCloseConnections: true,
    return503OnClosing: true,
    frameworkErrors: frameworkErrors(options.metrics),
  });
  useRouteSchemas(app);
  installErrorHandlers(app, options.metrics);
  registerGatewayModelRoutes(app, options.gateway, {
    maxRequestBytes: options.maxModelRequestBytes,
    ...(options.tracing === undefined ? {} : { tracing: options.tracing }),
    ...(options.arrivedFrom === undefined ? {} : { arrivedFrom: options.arrivedFrom }),
  });
  return app;
}
