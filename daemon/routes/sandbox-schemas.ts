/**
 * What the sandbox and snapshot routes (routes/sandboxes.ts) take and answer, as they declare it
 * to the OpenAPI document (daemon/openapi.ts). The zod schemas are those the routes and services
 * parse with.
 */
import { z } from 'zod';
import {
  ExecQuerySchema,
  ExecStreamEventSchema,
  ForkRequestSchema,
  ForkResponseSchema,
  GatewayReachSchema,
  KeepaliveRequestSchema,
  ListSandboxesQuerySchema,
  NetworkLogSchema,
  NetworkViewSchema,
  PathQuerySchema,
  PoolAcquireRequestSchema,
  SandboxListSchema,
  SandboxSchema,
  SnapshotListSchema,
  SnapshotRequestSchema,
  SnapshotResponseSchema,
  StopProcessesResponseSchema,
} from '../../core/schemas/api.ts';
import { ExecRequestSchema, ExecResultSchema } from '../../core/schemas/exec.ts';
import { NetworkPolicySchema, SandboxSpecSchema } from '../../core/schemas/sandbox.ts';
import { SnapshotInfoSchema } from '../../core/schemas/snapshot.ts';
import { ToolchainCheckRequestSchema, ToolchainCheckResultSchema } from '../../core/schemas/toolchain.ts';
import { IdempotencyHeadersSchema } from '../idempotency/http.ts';
import {
  BYTES,
  contentAnswer,
  contentBody,
  emptyAnswer,
  errorAnswers,
  jsonAnswer,
  optionalBody,
} from '../openapi.ts';

export const sandboxSchemas = {
  create: {
    headers: IdempotencyHeadersSchema,
    summary: 'create a sandbox and wait until it is ready, or take one from a pool (`{"pool": name}`)',
    body: z.union([SandboxSpecSchema, PoolAcquireRequestSchema]),
    response: { 201: jsonAnswer('the ready sandbox', SandboxSchema), ...errorAnswers(400, 429, 502) },
  },
  list: {
    summary: 'list sandboxes',
    querystring: ListSandboxesQuerySchema,
    response: { 200: jsonAnswer('sandboxes, oldest first', SandboxListSchema), ...errorAnswers(400) },
  },
  inspect: {
    summary: 'inspect a sandbox',
    response: { 200: jsonAnswer('the sandbox', SandboxSchema), ...errorAnswers(404) },
  },
  destroy: {
    summary: 'destroy a sandbox (idempotent)',
    response: { 204: emptyAnswer('destroyed or already gone') },
  },
  keepalive: {
    summary: 'renew the lease (never past the deadline)',
    ...optionalBody,
    body: KeepaliveRequestSchema,
    response: {
      200: jsonAnswer('the sandbox with its new lease', SandboxSchema),
      ...errorAnswers(400, 404),
    },
  },
  exec: {
    headers: IdempotencyHeadersSchema,
    summary: 'run a command; a non-zero exit is a result, not an error',
    querystring: ExecQuerySchema,
    body: ExecRequestSchema,
    response: {
      200: contentAnswer('the result (or, with stream=ndjson, one event per line)', {
        'application/json': ExecResultSchema,
        'application/x-ndjson': ExecStreamEventSchema,
      }),
      ...errorAnswers(400, 404),
    },
  },
  readFile: {
    summary: 'download one file (raw bytes)',
    querystring: PathQuerySchema,
    response: {
      200: contentAnswer('the bytes', { 'application/octet-stream': BYTES }),
      ...errorAnswers(400, 404),
    },
  },
  writeFile: {
    headers: IdempotencyHeadersSchema,
    summary:
      'upload one file (raw bytes; Content-Length required; parents created; `mode`: octal permission bits, e.g. 755)',
    querystring: PathQuerySchema,
    body: contentBody({ 'application/octet-stream': BYTES }),
    response: { 204: emptyAnswer('written'), ...errorAnswers(400, 404) },
  },
  readArchive: {
    summary: "download a tar of a directory's contents",
    querystring: PathQuerySchema,
    response: {
      200: contentAnswer('a tar stream', { 'application/x-tar': BYTES }),
      ...errorAnswers(400, 404),
    },
  },
  writeArchive: {
    headers: IdempotencyHeadersSchema,
    summary: 'extract a tar into a directory (refused whole if any entry escapes it)',
    querystring: PathQuerySchema,
    body: contentBody({ 'application/x-tar': BYTES }),
    response: { 204: emptyAnswer('extracted'), ...errorAnswers(400, 404) },
  },
  gateway: {
    summary:
      'make the model gateway (its model routes only) reachable from inside the sandbox, for agent CLIs in network-less sandboxes; idempotent',
    response: {
      200: jsonAnswer(
        'the URL the agent uses, as seen from inside the sandbox; the same for its whole life',
        GatewayReachSchema,
      ),
      ...errorAnswers(404, 501),
    },
  },
  networkView: {
    summary: "the sandbox's egress policy and the proxy its commands are pointed at",
    response: { 200: jsonAnswer('the policy', NetworkViewSchema), ...errorAnswers(404) },
  },
  networkSet: {
    summary:
      "set the sandbox's egress policy (capped by the daemon's egress configuration): new connections follow it, open ones are cut",
    body: NetworkPolicySchema,
    response: {
      200: jsonAnswer('the policy now in force', NetworkViewSchema),
      ...errorAnswers(400, 403, 404, 501),
    },
  },
  networkLog: {
    summary:
      'every attempt through the egress proxy, allowed or refused, oldest first (bounded; `dropped` counts the rest)',
    response: { 200: jsonAnswer('the attempts', NetworkLogSchema), ...errorAnswers(404) },
  },
  stopProcesses: {
    summary:
      'kill every process in the sandbox but its keeper (nothing can fork meanwhile); the sandbox stays ready. What a verifier calls before it judges',
    response: {
      200: jsonAnswer('how many were killed', StopProcessesResponseSchema),
      ...errorAnswers(404, 501),
    },
  },
  toolchainCheck: {
    summary:
      "which files of a verifier's interpreters and tools (and what they read before any test) differ from the sandbox's image, seen from outside the sandbox; what a verifier calls before it runs",
    ...optionalBody,
    body: ToolchainCheckRequestSchema,
    response: {
      200: jsonAnswer(
        "the tampered paths, none when the toolchain is the image's",
        ToolchainCheckResultSchema,
      ),
      ...errorAnswers(400, 404, 501),
    },
  },
  snapshot: {
    summary:
      "snapshot the sandbox's files: without `image` a managed snapshot (native where the provider has the `snapshot` capability, else an archive the daemon keeps; labelled, reaped after `ttlSeconds`, counted against `snapshots.maxCount`) that specs name as `snapshot:<id>`; with `image` a commit to that image (Docker, a name the operator allows). See docs/snapshots.md",
    ...optionalBody,
    body: SnapshotRequestSchema,
    response: {
      200: jsonAnswer(
        'the image a spec names, and for a managed snapshot its record',
        SnapshotResponseSchema,
      ),
      ...errorAnswers(400, 404, 413, 429, 501),
    },
  },
  fork: {
    headers: IdempotencyHeadersSchema,
    summary:
      "`count` new sandboxes holding the parent's files as of now (a managed snapshot, then one create per child, each admitted like any create, each with its own lease); the parent keeps running. A child gets the parent's spec with the overrides, its `lineage` and the `gym.fork.*` labels, and none of the parent's exec environment, gateway reach or egress policy. All or nothing: a child that fails removes the others and the snapshot. `live` is refused (501) where the provider cannot carry processes over",
    body: ForkRequestSchema,
    response: {
      201: jsonAnswer('the snapshot and the children, in fork order', ForkResponseSchema),
      ...errorAnswers(400, 404, 413, 429, 501),
    },
  },
  snapshots: {
    summary: "this daemon's managed snapshots, oldest first",
    response: { 200: jsonAnswer('snapshots', SnapshotListSchema) },
  },
  snapshotInspect: {
    summary: 'one managed snapshot',
    response: { 200: jsonAnswer('the snapshot', SnapshotInfoSchema), ...errorAnswers(404) },
  },
  snapshotDelete: {
    summary:
      "remove a managed snapshot and its content (idempotent); refused (400) while a pool's spec starts from it. Sandboxes already made from it keep their files",
    response: { 204: emptyAnswer('removed'), ...errorAnswers(400, 502) },
  },
};
