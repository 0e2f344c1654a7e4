/**
 * The OpenAPI document, generated from the same zod schemas that validate requests, so the
 * document cannot drift from what the server accepts.
 */
import { z } from 'zod';
import {
  AccessGrantCreatedSchema,
  AccessGrantListSchema,
  AccessGrantRequestSchema,
} from '../core/schemas/access.ts';
import {
  ErrorBodySchema,
  ExecStreamEventSchema,
  ForkRequestSchema,
  ForkResponseSchema,
  GatewayReachSchema,
  HealthSchema,
  KeepaliveRequestSchema,
  NetworkLogSchema,
  NetworkViewSchema,
  OpenRolloutRequestSchema,
  PoolAcquireRequestSchema,
  SandboxListSchema,
  SandboxSchema,
  SnapshotListSchema,
  SnapshotRequestSchema,
  SnapshotResponseSchema,
  StopProcessesResponseSchema,
} from '../core/schemas/api.ts';
import { ExecRequestSchema, ExecResultSchema } from '../core/schemas/exec.ts';
import {
  ImageInfoSchema,
  ImageListSchema,
  ImageStreamEventSchema,
  PrepareImageRequestSchema,
  PrepareImageResponseSchema,
} from '../core/schemas/image.ts';
import { PoolDefinitionSchema, PoolStatsSchema } from '../core/schemas/pool.ts';
import { NetworkPolicySchema, SandboxSpecSchema } from '../core/schemas/sandbox.ts';
import { SnapshotInfoSchema } from '../core/schemas/snapshot.ts';
import { ToolchainCheckRequestSchema, ToolchainCheckResultSchema } from '../core/schemas/toolchain.ts';

function schema(zodSchema: z.ZodType, io: 'input' | 'output' = 'output'): Record<string, unknown> {
  const { $schema: _ignored, ...rest } = z.toJSONSchema(zodSchema, { io, unrepresentable: 'any' }) as Record<
    string,
    unknown
  >;
  return rest;
}

const json = (zodSchema: z.ZodType, io: 'input' | 'output' = 'output') => ({
  content: { 'application/json': { schema: schema(zodSchema, io) } },
});
const errorResponse = {
  description: 'an error: `{"error": {"code", "message", "details"}}`',
  ...json(ErrorBodySchema),
};
const idParameter = { name: 'id', in: 'path', required: true, schema: { type: 'string' } };
const pathParameter = {
  name: 'path',
  in: 'query',
  required: true,
  schema: { type: 'string' },
  description: 'absolute path in the sandbox',
};

export function openApiDocument(version: string): Record<string, unknown> {
  return {
    openapi: '3.1.0',
    info: {
      title: 'gym sandbox daemon',
      version,
      description:
        'Sandboxes for agent environments. Every route but /healthz needs `Authorization: Bearer <token>` (the token is in the state directory). Errors carry a stable `code`.',
    },
    components: {
      securitySchemes: {
        bearer: {
          type: 'http',
          scheme: 'bearer',
          description:
            'the daemon token; or a scoped credential (`gym-access.…`) on the routes and sandboxes it grants (docs/api.md, "Scoped access")',
        },
        rolloutKey: { type: 'http', scheme: 'bearer', description: "a gateway rollout's key" },
      },
    },
    security: [{ bearer: [] }],
    paths: {
      '/healthz': {
        get: {
          summary: 'liveness and provider health (no auth)',
          security: [],
          responses: { 200: { description: 'health', ...json(HealthSchema) } },
        },
      },
      '/metrics': {
        get: { summary: 'Prometheus metrics', responses: { 200: { description: 'Prometheus text format' } } },
      },
      '/openapi.json': {
        get: { summary: 'this document', responses: { 200: { description: 'OpenAPI 3.1' } } },
      },
      '/v1/sandboxes': {
        post: {
          summary: 'create a sandbox and wait until it is ready, or take one from a pool (`{"pool": name}`)',
          requestBody: {
            required: true,
            content: {
              'application/json': {
                schema: {
                  oneOf: [schema(SandboxSpecSchema, 'input'), schema(PoolAcquireRequestSchema, 'input')],
                },
              },
            },
          },
          responses: {
            201: { description: 'the ready sandbox', ...json(SandboxSchema) },
            400: errorResponse,
            429: errorResponse,
            502: errorResponse,
          },
        },
        get: {
          summary: 'list sandboxes',
          parameters: [
            {
              name: 'label',
              in: 'query',
              schema: { type: 'string' },
              description: '`key=value`; repeat for more (all must match)',
            },
            { name: 'provider', in: 'query', schema: { type: 'string' } },
          ],
          responses: { 200: { description: 'sandboxes, oldest first', ...json(SandboxListSchema) } },
        },
      },
      '/v1/sandboxes/{id}': {
        parameters: [idParameter],
        get: {
          summary: 'inspect a sandbox',
          responses: { 200: { description: 'the sandbox', ...json(SandboxSchema) }, 404: errorResponse },
        },
        delete: {
          summary: 'destroy a sandbox (idempotent)',
          responses: { 204: { description: 'destroyed or already gone' } },
        },
      },
      '/v1/sandboxes/{id}/keepalive': {
        parameters: [idParameter],
        post: {
          summary: 'renew the lease (never past the deadline)',
          requestBody: { required: false, ...json(KeepaliveRequestSchema, 'input') },
          responses: {
            200: { description: 'the sandbox with its new lease', ...json(SandboxSchema) },
            404: errorResponse,
          },
        },
      },
      '/v1/sandboxes/{id}/exec': {
        parameters: [
          idParameter,
          {
            name: 'stream',
            in: 'query',
            schema: { type: 'string', enum: ['ndjson'] },
            description: 'stream output as NDJSON events, the result last',
          },
        ],
        post: {
          summary: 'run a command; a non-zero exit is a result, not an error',
          requestBody: { required: true, ...json(ExecRequestSchema, 'input') },
          responses: {
            200: {
              description: 'the result (or, with stream=ndjson, one event per line)',
              content: {
                'application/json': { schema: schema(ExecResultSchema) },
                'application/x-ndjson': { schema: schema(ExecStreamEventSchema) },
              },
            },
            404: errorResponse,
          },
        },
      },
      '/v1/sandboxes/{id}/files': {
        parameters: [idParameter, pathParameter],
        get: {
          summary: 'download one file (raw bytes)',
          responses: {
            200: { description: 'the bytes', content: { 'application/octet-stream': {} } },
            404: errorResponse,
          },
        },
        put: {
          summary: 'upload one file (raw bytes; Content-Length required; parents created)',
          parameters: [
            {
              name: 'mode',
              in: 'query',
              schema: { type: 'string' },
              description: 'octal permission bits, e.g. 755',
            },
          ],
          requestBody: { required: true, content: { 'application/octet-stream': {} } },
          responses: { 204: { description: 'written' }, 400: errorResponse, 404: errorResponse },
        },
      },
      '/v1/sandboxes/{id}/archive': {
        parameters: [idParameter, pathParameter],
        get: {
          summary: "download a tar of a directory's contents",
          responses: {
            200: { description: 'a tar stream', content: { 'application/x-tar': {} } },
            404: errorResponse,
          },
        },
        put: {
          summary: 'extract a tar into a directory (refused whole if any entry escapes it)',
          requestBody: { required: true, content: { 'application/x-tar': {} } },
          responses: { 204: { description: 'extracted' }, 400: errorResponse, 404: errorResponse },
        },
      },
      '/v1/sandboxes/{id}/gateway': {
        parameters: [idParameter],
        post: {
          summary:
            'make the model gateway (its model routes only) reachable from inside the sandbox, for agent CLIs in network-less sandboxes; idempotent',
          responses: {
            200: {
              description:
                'the URL the agent uses, as seen from inside the sandbox; the same for its whole life',
              ...json(GatewayReachSchema),
            },
            404: errorResponse,
            501: errorResponse,
          },
        },
      },
      '/v1/sandboxes/{id}/network': {
        parameters: [idParameter],
        get: {
          summary: "the sandbox's egress policy and the proxy its commands are pointed at",
          responses: { 200: { description: 'the policy', ...json(NetworkViewSchema) }, 404: errorResponse },
        },
        put: {
          summary:
            "set the sandbox's egress policy (capped by the daemon's egress configuration): new connections follow it, open ones are cut",
          requestBody: { required: true, ...json(NetworkPolicySchema, 'input') },
          responses: {
            200: { description: 'the policy now in force', ...json(NetworkViewSchema) },
            400: errorResponse,
            403: errorResponse,
            404: errorResponse,
            501: errorResponse,
          },
        },
      },
      '/v1/sandboxes/{id}/network/log': {
        parameters: [idParameter],
        get: {
          summary:
            'every attempt through the egress proxy, allowed or refused, oldest first (bounded; `dropped` counts the rest)',
          responses: { 200: { description: 'the attempts', ...json(NetworkLogSchema) }, 404: errorResponse },
        },
      },
      '/v1/gateway/rollouts': {
        post: {
          summary: 'open a rollout on the model gateway; its key is the API key its agent uses',
          requestBody: { required: false, ...json(OpenRolloutRequestSchema, 'input') },
          responses: { 201: { description: '{"rolloutId", "key", "basePath"}' }, 400: errorResponse },
        },
      },
      '/v1/gateway/rollouts/{rolloutId}/records': {
        parameters: [{ name: 'rolloutId', in: 'path', required: true, schema: { type: 'string' } }],
        get: {
          summary: 'every model call of the rollout: request, response or streamed events, usage, timing',
          responses: { 200: { description: '{"records": [...]}' }, 404: errorResponse },
        },
      },
      '/v1/gateway/rollouts/{rolloutId}': {
        parameters: [{ name: 'rolloutId', in: 'path', required: true, schema: { type: 'string' } }],
        delete: {
          summary: 'close the rollout (its key stops working; records stay)',
          responses: { 204: { description: 'closed' } },
        },
      },
      '/v1/gateway/{rolloutId}/v1/chat/completions': {
        parameters: [{ name: 'rolloutId', in: 'path', required: true, schema: { type: 'string' } }],
        post: {
          summary:
            'OpenAI Chat Completions (streaming or not), forwarded to the policy upstream and recorded; authenticated by the rollout key',
          security: [{ rolloutKey: [] }],
          responses: {
            200: { description: 'the upstream answer, unchanged' },
            401: errorResponse,
            429: errorResponse,
            502: errorResponse,
          },
        },
      },
      '/v1/gateway/{rolloutId}/v1/responses': {
        parameters: [{ name: 'rolloutId', in: 'path', required: true, schema: { type: 'string' } }],
        post: {
          summary:
            'OpenAI Responses API (streaming or not), forwarded and recorded; authenticated by the rollout key',
          security: [{ rolloutKey: [] }],
          responses: {
            200: { description: 'the upstream answer, unchanged' },
            401: errorResponse,
            429: errorResponse,
            502: errorResponse,
          },
        },
      },
      '/v1/gateway/{rolloutId}/v1/models': {
        parameters: [{ name: 'rolloutId', in: 'path', required: true, schema: { type: 'string' } }],
        get: {
          summary: 'the model the rollout talks to',
          security: [{ rolloutKey: [] }],
          responses: { 200: { description: 'an OpenAI model list' } },
        },
      },
      '/v1/images': {
        get: {
          summary:
            "the images the project built on a provider, and whether it has each built-in definition's current image",
          parameters: [
            {
              name: 'provider',
              in: 'query',
              schema: { type: 'string' },
              description: 'default: the default provider',
            },
          ],
          responses: {
            200: { description: 'images and definitions', ...json(ImageListSchema) },
            501: errorResponse,
          },
        },
        post: {
          summary:
            'build a built-in definition, or derive an image (a base with files and a command), or (as application/x-tar: plan.json, then step-<index>.tar per files step) carry out a build plan; the provider turns it into what it runs. Content-addressed: an image the provider has is not built again',
          parameters: [
            {
              name: 'stream',
              in: 'query',
              schema: { type: 'string', enum: ['ndjson'] },
              description: 'stream each step as NDJSON events, the result (or an error) last',
            },
          ],
          requestBody: {
            required: true,
            content: {
              ...json(PrepareImageRequestSchema, 'input').content,
              'application/x-tar': {},
            },
          },
          responses: {
            200: {
              description: 'what was built or found (or, with stream=ndjson, one event per line)',
              content: {
                'application/json': { schema: schema(PrepareImageResponseSchema) },
                'application/x-ndjson': { schema: schema(ImageStreamEventSchema) },
              },
            },
            400: errorResponse,
            404: errorResponse,
            501: errorResponse,
          },
        },
      },
      '/v1/images/inspect': {
        get: {
          summary: 'one image the provider has, with the directory its sandboxes start in',
          parameters: [
            { name: 'reference', in: 'query', required: true, schema: { type: 'string' } },
            {
              name: 'provider',
              in: 'query',
              schema: { type: 'string' },
              description: 'default: the default provider',
            },
          ],
          responses: {
            200: { description: 'the image', ...json(ImageInfoSchema) },
            404: errorResponse,
            501: errorResponse,
          },
        },
      },
      '/v1/pools': {
        get: {
          summary: 'list pools with their stats',
          responses: {
            200: {
              description: 'pools',
              content: {
                'application/json': {
                  schema: {
                    type: 'object',
                    properties: { pools: { type: 'array', items: schema(PoolStatsSchema) } },
                  },
                },
              },
            },
          },
        },
      },
      '/v1/pools/{name}': {
        parameters: [{ name: 'name', in: 'path', required: true, schema: { type: 'string' } }],
        put: {
          summary: 'define or redefine a pool (it fills in the background)',
          requestBody: { required: true, ...json(PoolDefinitionSchema, 'input') },
          responses: {
            200: { description: 'redefined', ...json(PoolStatsSchema) },
            201: { description: 'created', ...json(PoolStatsSchema) },
            400: errorResponse,
          },
        },
        get: {
          summary: "a pool's stats",
          responses: { 200: { description: 'stats', ...json(PoolStatsSchema) }, 404: errorResponse },
        },
        delete: {
          summary: 'drain a pool: idle members destroyed, leased ones keep their leases (idempotent)',
          responses: { 204: { description: 'drained' } },
        },
      },
      '/v1/sandboxes/{id}/stop-processes': {
        parameters: [idParameter],
        post: {
          summary:
            'kill every process in the sandbox but its keeper (nothing can fork meanwhile); the sandbox stays ready. What a verifier calls before it judges',
          responses: {
            200: { description: 'how many were killed', ...json(StopProcessesResponseSchema) },
            404: errorResponse,
            501: errorResponse,
          },
        },
      },
      '/v1/sandboxes/{id}/toolchain-check': {
        parameters: [idParameter],
        post: {
          summary:
            "which files of a verifier's interpreters and tools (and what they read before any test) differ from the sandbox's image, seen from outside the sandbox; what a verifier calls before it runs",
          requestBody: { required: false, ...json(ToolchainCheckRequestSchema, 'input') },
          responses: {
            200: {
              description: "the tampered paths, none when the toolchain is the image's",
              ...json(ToolchainCheckResultSchema),
            },
            404: errorResponse,
            501: errorResponse,
          },
        },
      },
      '/v1/sandboxes/{id}/snapshot': {
        parameters: [idParameter],
        post: {
          summary:
            "snapshot the sandbox's files: without `image` a managed snapshot (native where the provider has the `snapshot` capability, else an archive the daemon keeps; labelled, reaped after `ttlSeconds`, counted against `snapshots.maxCount`) that specs name as `snapshot:<id>`; with `image` a commit to that image (Docker, a name the operator allows). See docs/snapshots.md",
          requestBody: { required: false, ...json(SnapshotRequestSchema, 'input') },
          responses: {
            200: {
              description: 'the image a spec names, and for a managed snapshot its record',
              ...json(SnapshotResponseSchema),
            },
            400: errorResponse,
            404: errorResponse,
            413: errorResponse,
            429: errorResponse,
            501: errorResponse,
          },
        },
      },
      '/v1/sandboxes/{id}/fork': {
        parameters: [idParameter],
        post: {
          summary:
            "`count` new sandboxes holding the parent's files as of now (a managed snapshot, then one create per child, each admitted like any create, each with its own lease); the parent keeps running. A child gets the parent's spec with the overrides, its `lineage` and the `gym.fork.*` labels, and none of the parent's exec environment, gateway reach or egress policy. All or nothing: a child that fails removes the others and the snapshot. `live` is refused (501) where the provider cannot carry processes over",
          requestBody: { required: true, ...json(ForkRequestSchema, 'input') },
          responses: {
            201: { description: 'the snapshot and the children, in fork order', ...json(ForkResponseSchema) },
            400: errorResponse,
            404: errorResponse,
            413: errorResponse,
            429: errorResponse,
            501: errorResponse,
          },
        },
      },
      '/v1/access': {
        post: {
          summary:
            'lend sandboxes: mint a scoped credential with named rights, expiring no later than their leases (token only; the credential is shown once)',
          requestBody: { required: true, ...json(AccessGrantRequestSchema, 'input') },
          responses: {
            201: { description: 'the grant and its credential', ...json(AccessGrantCreatedSchema) },
            400: errorResponse,
            404: errorResponse,
            409: errorResponse,
          },
        },
        get: {
          summary: 'the live grants, without their credentials (token only)',
          responses: { 200: { description: 'grants', ...json(AccessGrantListSchema) } },
        },
      },
      '/v1/access/{id}': {
        parameters: [idParameter],
        delete: {
          summary: "revoke a grant (idempotent); the token, or the grant's own credential",
          responses: { 204: { description: 'revoked' }, 403: errorResponse },
        },
      },
      '/v1/snapshots': {
        get: {
          summary: "this daemon's managed snapshots, oldest first",
          responses: { 200: { description: 'snapshots', ...json(SnapshotListSchema) } },
        },
      },
      '/v1/snapshots/{id}': {
        parameters: [idParameter],
        get: {
          summary: 'one managed snapshot',
          responses: {
            200: { description: 'the snapshot', ...json(SnapshotInfoSchema) },
            404: errorResponse,
          },
        },
        delete: {
          summary:
            "remove a managed snapshot and its content (idempotent); refused (400) while a pool's spec starts from it. Sandboxes already made from it keep their files",
          responses: { 204: { description: 'removed' }, 400: errorResponse, 502: errorResponse },
        },
      },
    },
  };
}
