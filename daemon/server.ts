/**
 * Builds the HTTP API as a fastify app that is not yet listening (tests call `inject()`).
 * Validation is zod's (the same schemas make the OpenAPI document and the client); errors are
 * `{"error": {"code", "message", "details"}}` with the code's own HTTP status.
 */
import Fastify, { type FastifyBaseLogger, type FastifyInstance, LogController } from 'fastify';
import { GymError } from '../core/errors.ts';
import { toApiError } from './errors.ts';
import type { ModelGateway } from './gateway/gateway.ts';
import { tokenMatches } from './identity.ts';
import type { DaemonMetrics } from './metrics.ts';
import { openApiDocument } from './openapi.ts';
import type { PoolManager } from './pools/pool-manager.ts';
import { GATEWAY_MODEL_PATH, registerGatewayRoutes } from './routes/gateway.ts';
import { registerPoolRoutes } from './routes/pools.ts';
import { registerSandboxRoutes } from './routes/sandboxes.ts';
import type { SandboxManager } from './sandbox-manager.ts';

/** JSON bodies other than exec's are specs and small requests. */
const DEFAULT_BODY_LIMIT_BYTES = 16 * 1024 * 1024;
const PUBLIC_ROUTES = new Set(['/healthz']);

export interface ServerOptions {
  manager: SandboxManager;
  pools: PoolManager;
  gateway: ModelGateway;
  /** The unix socket agents in sandboxes reach the gateway through (see gateway-forward). */
  gatewaySocket?: string;
  metrics: DaemonMetrics;
  token: string;
  daemonId: string;
  version: string;
  /** A pino logger; silent when absent. */
  logger?: FastifyBaseLogger;
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
  });
  const openApi = openApiDocument(options.version);

  // Files and archives stream straight from the socket: leave the body unread for the route.
  app.addContentTypeParser(['application/octet-stream', 'application/x-tar'], (_request, _payload, done) =>
    done(null),
  );
  app.addContentTypeParser('*', (_request, _payload, done) => done(null));

  app.addHook('onRequest', async (request, reply) => {
    const path = request.url.split('?')[0] ?? '';
    // Model calls of agents carry their rollout's own key, checked by the gateway route.
    if (PUBLIC_ROUTES.has(path) || GATEWAY_MODEL_PATH.test(path)) return;
    const header = request.headers.authorization ?? '';
    const presented = header.startsWith('Bearer ') ? header.slice('Bearer '.length) : '';
    if (presented === '' || !tokenMatches(presented, options.token)) {
      reply.header('www-authenticate', 'Bearer');
      throw new GymError(
        'UNAUTHORIZED',
        presented === ''
          ? 'missing bearer token (see the token file in the state directory)'
          : 'wrong bearer token',
      );
    }
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

  app.setErrorHandler((error, request, reply) => {
    const apiError = toApiError(error);
    options.metrics.errors.inc({ code: apiError.code });
    if (apiError.httpStatus >= 500)
      request.log.error(
        { code: apiError.code, error: String(apiError.cause ?? apiError), url: request.url },
        apiError.message,
      );
    reply.status(apiError.httpStatus).type('application/json').send(apiError.toJSON());
  });

  app.setNotFoundHandler((request, reply) => {
    const error = new GymError(
      'ROUTE_NOT_FOUND',
      `no route ${request.method} ${request.url.split('?')[0]}; see GET /openapi.json`,
    );
    options.metrics.errors.inc({ code: error.code });
    reply.status(404).send(error.toJSON());
  });

  app.get('/healthz', async () => {
    const providers: Record<string, { ok: boolean; message: string }> = {};
    await Promise.all(
      [...options.manager.providers].map(async ([name, provider]) => {
        const health = await provider.health();
        providers[name] = { ok: health.ok, message: health.message };
      }),
    );
    return {
      ok: Object.values(providers).every((health) => health.ok),
      version: options.version,
      daemonId: options.daemonId,
      providers,
    };
  });

  app.get('/metrics', async (_request, reply) =>
    reply.type('text/plain; version=0.0.4').send(await options.metrics.text()),
  );
  app.get('/openapi.json', async () => openApi);
  registerSandboxRoutes(app, options.manager, options.pools, options.gatewaySocket);
  registerPoolRoutes(app, options.pools);
  registerGatewayRoutes(app, options.gateway);
  return app;
}
