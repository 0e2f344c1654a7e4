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
import { z } from 'zod';
import { GymError } from '../../core/errors.ts';
import { OpenRolloutRequestSchema } from '../../core/schemas/api.ts';
import { parseOrThrow } from '../../core/validate.ts';
import {
  GATEWAY_HOP_HEADER,
  type ModelApi,
  type ModelGateway,
  type OpenRollout,
} from '../gateway/gateway.ts';
import { emptyAnswer, errorAnswers, jsonAnswer, optionalBody } from '../openapi.ts';
import type { DaemonTracing } from '../telemetry/daemon-tracing.ts';
import { traceModelCall } from '../telemetry/model-call-span.ts';

/** What a route says about who may call it; read by the API's auth hook. */
export type RouteAuth = 'token' | 'rollout-key' | 'optional-token' | 'ui-session' | 'port-key';

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

/** What `POST /v1/gateway/rollouts` answers. */
const OpenedRolloutSchema = z.object({ rolloutId: z.string(), key: z.string(), basePath: z.string() });
/** Any JSON object: a model request or answer, forwarded as it is. */
const ModelJsonSchema = z.record(z.string(), z.unknown());

export function registerGatewayAdminRoutes(app: FastifyInstance, gateway: ModelGateway): void {
  app.post(
    '/v1/gateway/rollouts',
    {
      schema: {
        summary: 'open a rollout on the model gateway; its key is the API key its agent uses',
        ...optionalBody,
        body: OpenRolloutRequestSchema,
        response: {
          201: jsonAnswer('the rollout, its key and base path', OpenedRolloutSchema),
          ...errorAnswers(400),
        },
      },
    },
    async (request, reply) => {
      const body = parseOrThrow(OpenRolloutRequestSchema, request.body ?? {}, 'rollout request');
      reply.status(201);
      return gateway.openRollout(body);
    },
  );

  app.get(
    '/v1/gateway/rollouts/:rolloutId/records',
    {
      schema: {
        summary: 'every model call of the rollout: request, response or streamed events, usage, timing',
        response: {
          200: jsonAnswer('the records, oldest first', z.object({ records: z.array(ModelJsonSchema) })),
          ...errorAnswers(404),
        },
      },
    },
    async (request) => ({
      records: await gateway.records((request.params as { rolloutId: string }).rolloutId),
    }),
  );

  app.delete(
    '/v1/gateway/rollouts/:rolloutId',
    {
      schema: {
        summary: 'close the rollout (its key stops working; records stay)',
        response: { 204: emptyAnswer('closed') },
      },
    },
    async (request, reply) => {
      await gateway.closeRollout((request.params as { rolloutId: string }).rolloutId);
      reply.status(204);
    },
  );
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
  const routeOptions = (summary: string, body?: z.ZodType) => ({
    bodyLimit: options.maxRequestBytes,
    config: { auth: 'rollout-key' as const },
    onRequest: authorize,
    schema: {
      summary,
      security: [{ rolloutKey: [] }],
      ...(body === undefined ? {} : { body }),
      response: {
        200: jsonAnswer(
          'the upstream answer, unchanged (an event stream when the request asked for one)',
          ModelJsonSchema,
        ),
        ...errorAnswers(400, 401, 413, 429, 502),
      },
    },
  });

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

  app.post(
    '/v1/gateway/:rolloutId/v1/chat/completions',
    routeOptions(
      'OpenAI Chat Completions (streaming or not), forwarded to the policy upstream and recorded; authenticated by the rollout key',
      ModelJsonSchema,
    ),
    forward('chat.completions'),
  );
  app.post(
    '/v1/gateway/:rolloutId/v1/responses',
    routeOptions(
      'OpenAI Responses API (streaming or not), forwarded and recorded; authenticated by the rollout key',
      ModelJsonSchema,
    ),
    forward('responses'),
  );
  // Anthropic Messages (Claude Code appends /v1/messages to its base URL, the rollout's `/v1/gateway/{id}`).
  app.post(
    '/v1/gateway/:rolloutId/v1/messages',
    routeOptions(
      'Anthropic Messages (streaming or not), forwarded and recorded; authenticated by the rollout key (`x-api-key` too)',
      ModelJsonSchema,
    ),
    forward('messages'),
  );
  // Admitted and recorded like a model call: it reaches the upstream with the operator's key.
  app.post(
    '/v1/gateway/:rolloutId/v1/messages/count_tokens',
    routeOptions("Anthropic's token count, asked of the upstream and recorded", ModelJsonSchema),
    async (request) => {
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
    },
  );
  app.get(
    '/v1/gateway/:rolloutId/v1/models',
    routeOptions('the model the rollout talks to, as an OpenAI and Anthropic model list'),
    async (request) => {
      const id = request.rollout!.upstream.model ?? 'gateway';
      // One list both OpenAI and Anthropic clients read.
      return {
        object: 'list',
        data: [{ id, object: 'model', type: 'model', display_name: id, created: 0, owned_by: 'gym-gateway' }],
        has_more: false,
      };
    },
  );
}
