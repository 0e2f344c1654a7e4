import { PassThrough } from 'node:stream';
import { StringDecoder } from 'node:string_decoder';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { GymError } from '../../core/errors.ts';
import { SANDBOX_ID_PATTERN } from '../../core/ids.ts';
import {
  ExecQuerySchema,
  KeepaliveRequestSchema,
  ListSandboxesQuerySchema,
  PathQuerySchema,
  SnapshotRequestSchema,
} from '../../core/schemas/api.ts';
import { type ExecRequest, ExecRequestSchema } from '../../core/schemas/exec.ts';
import { parseOrThrow } from '../../core/validate.ts';
import { toApiError } from '../errors.ts';
import { completeRun, requestBody } from '../idempotency/http.ts';
import type { IdempotencyStore } from '../idempotency/store.ts';
import type { PoolManager } from '../pools/pool-manager.ts';
import type { ManagedNetwork } from '../sandbox-manager.ts';
import type { SandboxLifecycle } from '../sandboxes/lifecycle.ts';
import type { SandboxOperations } from '../sandboxes/operations.ts';
import type { ForkResult } from '../snapshots/fork.ts';
import type { SnapshotService } from '../snapshots/snapshots.ts';
import { sandboxSchemas } from './sandbox-schemas.ts';

/** The largest JSON body an exec accepts (its stdin travels inside it). */
const EXEC_BODY_LIMIT_BYTES = 96 * 1024 * 1024;

function sandboxId(request: FastifyRequest): string {
  const { id } = request.params as { id: string };
  if (!SANDBOX_ID_PATTERN.test(id))
    throw new GymError('SANDBOX_NOT_FOUND', `sandbox ${id} does not exist (not a sandbox id)`, {
      details: { sandboxId: id },
    });
  return id;
}

function parseLabels(raw: string | string[] | undefined): Record<string, string> {
  const labels: Record<string, string> = {};
  for (const item of [raw ?? []].flat().flatMap((value) => value.split(','))) {
    if (item === '') continue;
    const separator = item.indexOf('=');
    if (separator <= 0)
      throw new GymError('VALIDATION_FAILED', `invalid label filter "${item}": use key=value`, {
        details: { label: item },
      });
    labels[item.slice(0, separator)] = item.slice(separator + 1);
  }
  return labels;
}

/**
 * What a scoped credential may do on a route, for a sandbox it names (`config.scoped`, read by the
 * API's auth hook). Routes without one (create, list, destroy, keepalive, network, snapshot, fork,
 * snapshots) refuse every scoped credential.
 */
const scopedInspect = { config: { scoped: 'inspect' as const } };
const scopedExec = { config: { scoped: 'exec' as const } };
const scopedFiles = { config: { scoped: 'files' as const } };
const scopedEndpoints = { config: { scoped: 'endpoints' as const } };
const execOptions = {
  bodyLimit: EXEC_BODY_LIMIT_BYTES,
  config: { scoped: 'exec' as const, idempotent: { body: 'json' as const, synced: false } },
};
/** Routes that take an `Idempotency-Key` (daemon/idempotency/http.ts). */
const idempotentJson = { config: { idempotent: { body: 'json' as const, synced: true } } };
const idempotentFiles = {
  config: { scoped: 'files' as const, idempotent: { body: 'stream' as const, synced: false } },
};

/** The parts of the daemon's sandboxes the routes call (`SandboxManager` has both). */
export interface SandboxRouteTargets {
  lifecycle: SandboxLifecycle;
  operations: SandboxOperations;
  network: ManagedNetwork;
  snapshots: SnapshotService;
  fork(id: string, input: unknown): Promise<ForkResult>;
}

export function registerSandboxRoutes(
  app: FastifyInstance,
  targets: SandboxRouteTargets,
  pools: PoolManager,
  idempotency: IdempotencyStore,
): void {
  const { lifecycle, operations, network, snapshots } = targets;
  const fork = (id: string, input: unknown) => targets.fork(id, input);
  app.post(
    '/v1/sandboxes/:id/gateway',
    { ...scopedEndpoints, schema: sandboxSchemas.gateway },
    async (request) => operations.exposeGateway(sandboxId(request)),
  );

  app.get('/v1/sandboxes/:id/network', { schema: sandboxSchemas.networkView }, async (request) =>
    network.view(sandboxId(request)),
  );
  app.put('/v1/sandboxes/:id/network', { schema: sandboxSchemas.networkSet }, async (request) =>
    network.set(sandboxId(request), request.body),
  );
  app.get('/v1/sandboxes/:id/network/log', { schema: sandboxSchemas.networkLog }, async (request) =>
    network.log(sandboxId(request)),
  );

  app.post('/v1/sandboxes', { ...idempotentJson, schema: sandboxSchemas.create }, async (request, reply) => {
    const body = (request.body ?? {}) as Record<string, unknown>;
    const sandbox =
      typeof body === 'object' && body !== null && 'pool' in body
        ? await pools.acquire(body)
        : await network.create(body);
    reply.status(201);
    return sandbox;
  });

  app.get('/v1/sandboxes', { schema: sandboxSchemas.list }, async (request) => {
    const query = parseOrThrow(ListSandboxesQuerySchema, request.query, 'query');
    return {
      sandboxes: lifecycle.list({
        labels: parseLabels(query.label),
        ...(query.provider === undefined ? {} : { provider: query.provider }),
      }),
    };
  });

  app.get('/v1/sandboxes/:id', { ...scopedInspect, schema: sandboxSchemas.inspect }, async (request) =>
    lifecycle.get(sandboxId(request)),
  );

  app.delete('/v1/sandboxes/:id', { schema: sandboxSchemas.destroy }, async (request, reply) => {
    await lifecycle.destroy(sandboxId(request));
    reply.status(204);
  });

  app.post('/v1/sandboxes/:id/keepalive', { schema: sandboxSchemas.keepalive }, async (request) => {
    const body = parseOrThrow(KeepaliveRequestSchema, request.body ?? {}, 'keepalive request');
    return operations.keepalive(sandboxId(request), body.ttlSeconds);
  });

  app.post(
    '/v1/sandboxes/:id/exec',
    { ...execOptions, schema: sandboxSchemas.exec },
    async (request, reply) => {
      const id = sandboxId(request);
      const query = parseOrThrow(ExecQuerySchema, request.query, 'query');
      // Parsed once, here: the streamed form needs the request's output cap before it starts.
      const exec = parseOrThrow(ExecRequestSchema, request.body, 'exec request');
      if (query.stream === undefined) return operations.exec(id, exec);
      return streamExec({ lifecycle, operations }, id, exec, reply, (status, last) =>
        completeRun(idempotency, request, status, 'application/x-ndjson', last),
      );
    },
  );

  app.put(
    '/v1/sandboxes/:id/files',
    { ...idempotentFiles, schema: sandboxSchemas.writeFile },
    async (request, reply) => {
      const id = sandboxId(request);
      const query = parseOrThrow(PathQuerySchema, request.query, 'query');
      const length = Number(request.headers['content-length']);
      if (!Number.isInteger(length) || length < 0) {
        throw new GymError(
          'VALIDATION_FAILED',
          'a file upload needs a Content-Length header (the tar header carries the size up front)',
        );
      }
      await operations.writeFile(
        id,
        query.path,
        { stream: requestBody(request), sizeBytes: length },
        query.mode === undefined ? undefined : Number.parseInt(query.mode, 8),
      );
      reply.status(204);
    },
  );

  app.get(
    '/v1/sandboxes/:id/files',
    { ...scopedFiles, schema: sandboxSchemas.readFile },
    async (request, reply) => {
      const query = parseOrThrow(PathQuerySchema, request.query, 'query');
      const stream = await operations.readFile(sandboxId(request), query.path);
      return reply.type('application/octet-stream').send(stream);
    },
  );

  app.put(
    '/v1/sandboxes/:id/archive',
    { ...idempotentFiles, schema: sandboxSchemas.writeArchive },
    async (request, reply) => {
      const query = parseOrThrow(PathQuerySchema, request.query, 'query');
      await operations.writeArchive(sandboxId(request), query.path, requestBody(request));
      reply.status(204);
    },
  );

  app.get(
    '/v1/sandboxes/:id/archive',
    { ...scopedFiles, schema: sandboxSchemas.readArchive },
    async (request, reply) => {
      const query = parseOrThrow(PathQuerySchema, request.query, 'query');
      const stream = await operations.readArchive(sandboxId(request), query.path);
      return reply.type('application/x-tar').send(stream);
    },
  );

  app.post(
    '/v1/sandboxes/:id/stop-processes',
    { ...scopedExec, schema: sandboxSchemas.stopProcesses },
    async (request) => operations.stopProcesses(sandboxId(request)),
  );

  app.post(
    '/v1/sandboxes/:id/toolchain-check',
    { ...scopedExec, schema: sandboxSchemas.toolchainCheck },
    async (request) => operations.checkToolchain(sandboxId(request), request.body ?? {}),
  );

  app.post('/v1/sandboxes/:id/snapshot', { schema: sandboxSchemas.snapshot }, async (request) => {
    const body = parseOrThrow(SnapshotRequestSchema, request.body ?? {}, 'snapshot request');
    const id = sandboxId(request);
    if (body.image !== undefined) {
      if (body.ttlSeconds !== undefined || body.labels !== undefined || body.live !== undefined)
        throw new GymError(
          'VALIDATION_FAILED',
          'invalid snapshot request: ttlSeconds, labels and live are for a managed snapshot (no image); a named image is not reaped',
          { details: { issues: [{ path: 'image', message: 'not with ttlSeconds, labels or live' }] } },
        );
      // The answer's shape is the API's (`SnapshotResponseSchema`), whatever else the provider tells.
      return { image: (await operations.snapshot(id, body.image)).image };
    }
    const snapshot = await snapshots.create(id, {
      ttlSeconds: body.ttlSeconds,
      labels: body.labels,
      live: body.live === true,
    });
    return { image: snapshot.image, snapshot };
  });

  app.post(
    '/v1/sandboxes/:id/fork',
    { ...idempotentJson, schema: sandboxSchemas.fork },
    async (request, reply) => {
      const forked = await fork(sandboxId(request), request.body ?? {});
      reply.status(201);
      return forked;
    },
  );

  app.get('/v1/snapshots', { schema: sandboxSchemas.snapshots }, async () => ({
    snapshots: snapshots.list(),
  }));

  app.get('/v1/snapshots/:id', { schema: sandboxSchemas.snapshotInspect }, async (request) =>
    snapshots.get((request.params as { id: string }).id),
  );

  app.delete('/v1/snapshots/:id', { schema: sandboxSchemas.snapshotDelete }, async (request, reply) => {
    await snapshots.delete((request.params as { id: string }).id);
    reply.status(204);
  });
}

/**
 * NDJSON: `{"type":"stdout","data":...}` and `stderr` events as output arrives (UTF-8, split on
 * character boundaries), then one `{"type":"result","result":...}` or `{"type":"error",...}`.
 * Errors found before the command starts (unknown sandbox, bad request) are ordinary error responses.
 *
 * The events carry at most the request's `maxOutputBytes` of each stream (the result keeps head
 * and tail, and says what was dropped), so a client that reads slowly holds at most about that
 * much in the daemon. A client that goes away before the result cancels the command as a timeout
 * would.
 */
async function streamExec(
  { lifecycle, operations }: Pick<SandboxRouteTargets, 'lifecycle' | 'operations'>,
  id: string,
  exec: ExecRequest,
  reply: FastifyReply,
  /** Told the last line (the result or the error) before the stream ends. */
  onLast: (status: number, line: string) => void,
): Promise<FastifyReply> {
  lifecycle.get(id);
  const output = new PassThrough();
  const decoders = { stdout: new StringDecoder('utf8'), stderr: new StringDecoder('utf8') };
  const room = { stdout: exec.maxOutputBytes, stderr: exec.maxOutputBytes };
  const write = (event: Record<string, unknown>) => output.write(`${JSON.stringify(event)}\n`);
  // The status the answer would have had unstreamed: an error refused before it ran frees an idempotency key.
  const last = (status: number, event: Record<string, unknown>) => {
    const line = `${JSON.stringify(event)}\n`;
    onLast(status, line);
    output.write(line);
  };
  const cancel = new AbortController();
  reply.raw.once('close', () => {
    if (!reply.raw.writableFinished) cancel.abort();
  });
  operations
    .exec(id, exec, {
      signal: cancel.signal,
      onOutput: (stream, chunk) => {
        if (room[stream] <= 0) return;
        const kept = chunk.length <= room[stream] ? chunk : chunk.subarray(0, room[stream]);
        room[stream] -= kept.length;
        const data = decoders[stream].write(kept);
        if (data !== '') write({ type: stream, data });
      },
    })
    .then(
      (result) => {
        for (const stream of ['stdout', 'stderr'] as const) {
          // A character cut by the cap is not completed with a replacement mark past the cap.
          const rest = room[stream] > 0 ? decoders[stream].end() : '';
          if (rest !== '') write({ type: stream, data: rest });
        }
        last(200, { type: 'result', result });
      },
      (error: unknown) => {
        const apiError = toApiError(error);
        last(apiError.httpStatus, { type: 'error', error: apiError.toJSON().error });
      },
    )
    .finally(() => output.end());
  // Headers go out now, not with the first output: a client sees at once that its command runs.
  reply.hijack();
  reply.raw.writeHead(200, { 'content-type': 'application/x-ndjson', 'cache-control': 'no-cache' });
  reply.raw.flushHeaders();
  output.pipe(reply.raw);
  return reply;
}
