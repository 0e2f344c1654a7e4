/**
 * The gateway's routes, in two groups that are registered apart:
 *
 * - administration (open, read the records of, close a rollout): the daemon token, on the API;
 * - model calls (`/v1/gateway/{rolloutId}/v1/...`): the rollout's own key, checked in the route's
 *   own `onRequest` hook, so a request without the key is refused before a byte of its body is
 *   read. These are the only routes of the gateway server that sandboxes reach.
 */
import { PassThrough } from 'node:stream';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { GymError } from '../../core/errors.ts';
import { OpenRolloutRequestSchema } from '../../core/schemas/api.ts';
import { parseOrThrow } from '../../core/validate.ts';
import {
  GATEWAY_HOP_HEADER,
  type ModelApi,
  type ModelGateway,
  type OpenRollout,
} from '../gateway/gateway.ts';
import type { DaemonTracing } from '../telemetry/daemon-tracing.ts';
import { traceModelCall } from '../telemetry/model-call-span.ts';

/** What a route says about who may call it; read by the API's auth hook. */
export type RouteAuth = 'token' | 'rollout-key' | 'optional-token' | 'ui-session';

declare module 'fastify' {
  interface FastifyContextConfig {
    auth?: RouteAuth;
  }
  interface FastifyRequest {
    /** The rollout a model call was authorized for (set by the route's onRequest hook). */
    rollout?: OpenRollout;
  }
}

function presentedKey(request: FastifyRequest): string {
  const header = request.headers.authorization ?? '';
  if (header.startsWith('Bearer ')) return header.slice('Bearer '.length);
  // Anthropic-style clients send the key as x-api-key.
  const apiKey = request.headers['x-api-key'];
  return typeof apiKey === 'string' ? apiKey : '';
}

/** The Anthropic headers of an agent's request that an Anthropic upstream needs as they were. */
function anthropicHeaders(request: FastifyRequest): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const name of ['anthropic-version', 'anthropic-beta']) {
    const value = request.headers[name];
    if (typeof value === 'string') headers[name] = value;
  }
  return headers;
}

export function registerGatewayAdminRoutes(app: FastifyInstance, gateway: ModelGateway): void {
  app.post('/v1/gateway/rollouts', async (request, reply) => {
    const body = parseOrThrow(OpenRolloutRequestSchema, request.body ?? {}, 'rollout request');
    reply.status(201);
    return gateway.openRollout(body);
  });

  app.get('/v1/gateway/rollouts/:rolloutId/records', async (request) => ({
    records: await gateway.records((request.params as { rolloutId: string }).rolloutId),
  }));

  app.delete('/v1/gateway/rollouts/:rolloutId', async (request, reply) => {
    await gateway.closeRollout((request.params as { rolloutId: string }).rolloutId);
    reply.status(204);
  });
}

export interface ModelRouteOptions {
  /** The largest model request accepted (the body limit of these routes). */
  maxRequestBytes: number;
  /** A span per model call (docs/tracing.md); absent or off: none. */
  tracing?: DaemonTracing;
  /** The sandbox whose own gateway socket a connection came through (`../gateway/arrivals.ts`). */
  arrivedFrom?: (socket: object) => string | undefined;
}

export function registerGatewayModelRoutes(
  app: FastifyInstance,
  gateway: ModelGateway,
  options: ModelRouteOptions,
): void {
  /** Runs before the body is read: an unknown rollout or a wrong key costs the daemon nothing. */
  const authorize = async (request: FastifyRequest, reply: FastifyReply) => {
    try {
      if (request.headers[GATEWAY_HOP_HEADER] === gateway.hopId) {
        throw new GymError(
          'GATEWAY_LOOP',
          'this model call came from this gateway: its upstream leads back to the daemon',
        );
      }
      request.rollout = gateway.authorize(
        (request.params as { rolloutId: string }).rolloutId,
        presentedKey(request),
        options.arrivedFrom?.(request.raw.socket),
      );
    } catch (error) {
      // Close the connection rather than read and drop whatever body the caller announced.
      reply.header('connection', 'close');
      throw error;
    }
  };
  const routeOptions = {
    bodyLimit: options.maxRequestBytes,
    config: { auth: 'rollout-key' as const },
    onRequest: authorize,
  };

  const forward = (api: ModelApi) => async (request: FastifyRequest, reply: FastifyReply) => {
    const rollout = request.rollout!;
    const body = request.body;
    if (typeof body !== 'object' || body === null || Array.isArray(body))
      throw new GymError('VALIDATION_FAILED', 'the request body must be a JSON object');
    // What the call will record, from the request as it will be recorded (a chunked body has no content-length to trust).
    const requestBytes = Buffer.byteLength(JSON.stringify(body));
    const release = gateway.admit(
      rollout,
      gateway.recordBound(rollout, api, body as Record<string, unknown>, requestBytes),
    );
    try {
      return await traceModelCall(options.tracing, rollout, api, body as Record<string, unknown>, () =>
        forwardAdmitted(api, rollout, body as Record<string, unknown>, reply, anthropicHeaders(request)),
      );
    } finally {
      release();
    }
  };

  const forwardAdmitted = async (
    api: ModelApi,
    rollout: OpenRollout,
    body: Record<string, unknown>,
    reply: FastifyReply,
    upstreamHeaders: Record<string, string>,
  ) => {
    if (body.stream !== true) return gateway.forward(rollout, api, body, undefined, upstreamHeaders);
    // Streamed: headers go out only with the first event, so an upstream that fails at once is an ordinary error response.
    const output = new PassThrough();
    let isStarted = false;
    const start = () => {
      if (isStarted) return;
      isStarted = true;
      reply.header('content-type', 'text/event-stream').header('cache-control', 'no-cache').send(output);
    };
    try {
      await gateway.forward(
        rollout,
        api,
        body,
        {
          event: (name, data) => {
            start();
            output.write(`${name === null ? '' : `event: ${name}\n`}data: ${JSON.stringify(data)}\n\n`);
          },
          end: (trailer) => {
            start();
            output.end(trailer);
          },
        },
        upstreamHeaders,
      );
    } catch (error) {
      if (!isStarted) throw error;
      const gymError =
        error instanceof GymError ? error : new GymError('MODEL_UPSTREAM_ERROR', String(error));
      // Anthropic clients read a stream's error event in Anthropic's shape.
      const data =
        api === 'messages'
          ? { type: 'error', error: { type: 'api_error', message: gymError.message, code: gymError.code } }
          : gymError.toJSON();
      output.end(`event: error\ndata: ${JSON.stringify(data)}\n\n`);
    }
    return reply;
  };

  app.post('/v1/gateway/:rolloutId/v1/chat/completions', routeOptions, forward('chat.completions'));
  app.post('/v1/gateway/:rolloutId/v1/responses', routeOptions, forward('responses'));
  // Anthropic Messages (Claude Code appends /v1/messages to its base URL, the rollout's `/v1/gateway/{id}`).
  app.post('/v1/gateway/:rolloutId/v1/messages', routeOptions, forward('messages'));
  // Admitted and recorded like a model call: it reaches the upstream with the operator's key.
  app.post('/v1/gateway/:rolloutId/v1/messages/count_tokens', routeOptions, async (request) => {
    const body = request.body;
    if (typeof body !== 'object' || body === null || Array.isArray(body))
      throw new GymError('VALIDATION_FAILED', 'the request body must be a JSON object');
    // Recorded: the request and a small answer.
    const release = gateway.admit(request.rollout!, Buffer.byteLength(JSON.stringify(body)) + 1024);
    try {
      return await gateway.countTokens(
        request.rollout!,
        body as Record<string, unknown>,
        anthropicHeaders(request),
      );
    } finally {
      release();
    }
  });
  app.get('/v1/gateway/:rolloutId/v1/models', routeOptions, async (request) => {
    const id = request.rollout!.upstream.model ?? 'gateway';
    // One list both OpenAI and Anthropic clients read.
    return {
      object: 'list',
      data: [{ id, object: 'model', type: 'model', display_name: id, created: 0, owned_by: 'gym-gateway' }],
      has_more: false,
    };
  });
}
