/**
 * The typed client of the daemon's HTTP API, for the CLI and for other TypeScript programs.
 * Types come from the same zod schemas the server validates with; errors come back as GymErrors
 * with the server's code.
 */
import { randomUUID } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { createInterface } from 'node:readline';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import * as tar from 'tar-stream';
import { ERROR_CODES, type ErrorCode, GymError } from '../core/errors.ts';
import type { AccessGrant, AccessGrantCreated, AccessGrantRequest } from '../core/schemas/access.ts';
import type { NetworkLog, NetworkView, Sandbox, StopProcessesResult } from '../core/schemas/api.ts';
import type { ExecRequestInput, ExecResult } from '../core/schemas/exec.ts';
import type {
  ImageInfoResponse,
  ImageList,
  ImagePlanRequest,
  ImageProgress,
  ImageStreamEvent,
  PrepareImageRequest,
  PrepareImageResponse,
} from '../core/schemas/image.ts';
import type { PoolDefinitionInput, PoolStats } from '../core/schemas/pool.ts';
import type { NetworkPolicyInput, SandboxSpecInput } from '../core/schemas/sandbox.ts';
import type { PortEndpoint, ServiceOutput } from '../core/schemas/service.ts';
import type { ForkRequestInput, SnapshotInfo } from '../core/schemas/snapshot.ts';
import type { ToolchainCheckRequestInput, ToolchainCheckResult } from '../core/schemas/toolchain.ts';
import { PtyClient } from './ptys.ts';

export interface GymClientOptions {
  /** `http://127.0.0.1:7380` (TCP) ... */
  url?: string;
  /** ... or a unix socket path. */
  socket?: string;
  /** The daemon's token, or a scoped credential (`gym-access.…`) on the routes it grants. */
  token: string;
  /**
   * The W3C `traceparent` to send with each request (the caller's active span), so the daemon's
   * spans of it nest under the caller's trace. Unset: none is sent.
   */
  traceparent?: () => string | undefined;
}

interface RequestOptions {
  query?: Record<string, string | string[] | undefined>;
  json?: unknown;
  body?: Readable | Buffer;
  contentType?: string;
  contentLength?: number;
  /**
   * Sent as `Idempotency-Key`: the daemon runs a request once per key and answers a repeat with
   * the first answer (docs/api.md, "Safe retries"). With one, a request whose connection broke
   * after it was sent goes once more with the same key (its body permitting).
   */
  idempotencyKey?: string;
}

/** A call that changes things: the key to send (the caller's, or a fresh one). */
export interface IdempotentCallOptions {
  /** Default: a fresh UUID per call. Pass your own to retry a call yourself, e.g. after a daemon restart. */
  idempotencyKey?: string;
}

function keyOf(options: IdempotentCallOptions): string {
  return options.idempotencyKey ?? randomUUID();
}

/** Errors of a connection that broke after the request may have reached the daemon. */
const BROKEN_CONNECTION = new Set(['ECONNRESET', 'EPIPE', 'ECONNABORTED']);

export type ExecStreamEvent =
  | { type: 'stdout' | 'stderr'; data: string }
  | { type: 'result'; result: ExecResult }
  | { type: 'error'; error: { code: ErrorCode; message: string; details: Record<string, unknown> } };

async function readBody(response: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of response) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

function errorFromBody(status: number, body: Buffer): GymError {
  try {
    const parsed = JSON.parse(body.toString('utf8')) as {
      error?: { code?: string; message?: string; details?: Record<string, unknown> };
    };
    const code = parsed.error?.code;
    if (code !== undefined && code in ERROR_CODES) {
      return new GymError(code as ErrorCode, parsed.error?.message ?? code, {
        details: parsed.error?.details ?? {},
      });
    }
  } catch {
    // Not our error shape: fall through.
  }
  return new GymError(
    'INTERNAL',
    `unexpected HTTP ${status} from the daemon: ${body.toString('utf8').slice(0, 500)}`,
  );
}

export class GymClient {
  readonly #options: GymClientOptions;

  constructor(options: GymClientOptions) {
    if ((options.url === undefined) === (options.socket === undefined))
      throw new Error('GymClient needs exactly one of url or socket');
    this.#options = options;
  }

  /** The terminal (PTY session) calls (`ptys.ts`). */
  get ptys(): PtyClient {
    return new PtyClient(this);
  }

  /** The same daemon and token, each request sent with `traceparent()`'s value when it has one. */
  withTraceparent(traceparent: () => string | undefined): GymClient {
    return new GymClient({ ...this.#options, traceparent });
  }

  /** Sends one request; resolves with the response once its headers arrived, or throws the API error. */
  async raw(method: string, path: string, options: RequestOptions = {}): Promise<IncomingMessage> {
    const search = new URLSearchParams();
    for (const [key, value] of Object.entries(options.query ?? {})) {
      for (const item of [value ?? []].flat()) search.append(key, item);
    }
    const fullPath = `${path}${search.size > 0 ? `?${search}` : ''}`;
    const base = this.#options.url === undefined ? undefined : new URL(this.#options.url);
    const headers: Record<string, string> = { authorization: `Bearer ${this.#options.token}` };
    const traceparent = this.#options.traceparent?.();
    if (traceparent !== undefined) headers.traceparent = traceparent;
    if (options.idempotencyKey !== undefined) headers['idempotency-key'] = options.idempotencyKey;
    let payload: Buffer | Readable | undefined = options.body;
    if (options.json !== undefined) {
      payload = Buffer.from(JSON.stringify(options.json));
      headers['content-type'] = 'application/json';
    } else if (options.contentType !== undefined) headers['content-type'] = options.contentType;
    if (Buffer.isBuffer(payload)) headers['content-length'] = String(payload.length);
    else if (options.contentLength !== undefined) headers['content-length'] = String(options.contentLength);

    const send = () =>
      new Promise<IncomingMessage>((resolve, reject) => {
        const request = httpRequest(
          {
            method,
            path: fullPath,
            headers,
            ...(base === undefined
              ? { socketPath: this.#options.socket }
              : { host: base.hostname, port: base.port || 80 }),
          },
          resolve,
        );
        request.on('error', (error: NodeJS.ErrnoException) =>
          reject(
            new GymError(
              'DAEMON_UNAVAILABLE',
              `the daemon does not answer at ${this.#options.url ?? this.#options.socket} (${error.code ?? error.message}); start it with \`gym daemon start\``,
              {
                cause: error,
              },
            ),
          ),
        );
        if (payload === undefined) request.end();
        else if (Buffer.isBuffer(payload)) request.end(payload);
        else {
          payload.on('error', (error) => request.destroy(error));
          payload.pipe(request);
        }
      });
    const response = await send().catch((error: unknown) => {
      // A keyed request cut off after it may have arrived goes once more: the daemon runs it at most once.
      const code = ((error as GymError).cause as NodeJS.ErrnoException | undefined)?.code;
      const replayable = payload === undefined || Buffer.isBuffer(payload);
      if (options.idempotencyKey === undefined || !replayable || !BROKEN_CONNECTION.has(code ?? ''))
        throw error;
      return send();
    });
    if ((response.statusCode ?? 500) >= 400)
      throw errorFromBody(response.statusCode ?? 500, await readBody(response));
    return response;
  }

  async #json<T>(method: string, path: string, options: RequestOptions = {}): Promise<T> {
    const response = await this.raw(method, path, options);
    const body = await readBody(response);
    return (body.length === 0 ? undefined : JSON.parse(body.toString('utf8'))) as T;
  }

  health(): Promise<{
    ok: boolean;
    version: string;
    daemonId: string;
    providers: Record<string, { ok: boolean; message: string }>;
  }> {
    return this.#json('GET', '/healthz');
  }

  /** Creates from a spec, or takes a sandbox from a pool with `{ pool, env?, labels?, ttlSeconds? }`. */
  createSandbox(
    spec:
      | SandboxSpecInput
      | { pool: string; env?: Record<string, string>; labels?: Record<string, string>; ttlSeconds?: number },
    options: IdempotentCallOptions = {},
  ): Promise<Sandbox> {
    return this.#json('POST', '/v1/sandboxes', { json: spec, idempotencyKey: keyOf(options) });
  }

  definePool(name: string, definition: PoolDefinitionInput): Promise<PoolStats> {
    return this.#json('PUT', `/v1/pools/${encodeURIComponent(name)}`, { json: definition });
  }

  /** The images the project built on a provider (default: the daemon's default), and each definition's state. */
  listImages(options: { provider?: string } = {}): Promise<ImageList> {
    return this.#json('GET', '/v1/images', { query: { provider: options.provider } });
  }

  /**
   * Builds a built-in definition or derives an image, on the provider that will run it; answers
   * when done (a Debian base takes about a minute the first time, nothing once it exists).
   */
  async prepareImage(
    request: PrepareImageRequest,
    options: { onProgress?: (progress: ImageProgress) => void } = {},
  ): Promise<PrepareImageResponse> {
    return this.#prepare({ json: request }, options);
  }

  /**
   * Carries out a build plan on the daemon's provider (a Harbor task's Dockerfile): uploads
   * plan.json, then for each `files` step (by index in `archives`) its tar, a file on disk
   * (streamed) or bytes.
   */
  async buildImagePlan(
    request: ImagePlanRequest,
    archives: ReadonlyMap<number, { path: string } | Buffer>,
    options: { onProgress?: (progress: ImageProgress) => void } = {},
  ): Promise<PrepareImageResponse> {
    const pack = tar.pack();
    const packed = (async () => {
      pack.entry({ name: 'plan.json', mode: 0o644 }, JSON.stringify(request));
      for (const [index, step] of request.steps.entries()) {
        if (step.kind !== 'files') continue;
        const archive = archives.get(index);
        if (archive === undefined) throw new GymError('VALIDATION_FAILED', `no tar for files step ${index}`);
        const name = `step-${index}.tar`;
        if (Buffer.isBuffer(archive)) {
          pack.entry({ name, mode: 0o644 }, archive);
          continue;
        }
        const { size } = await stat(archive.path);
        await pipeline(
          createReadStream(archive.path),
          pack.entry({ name, mode: 0o644, size }) as unknown as NodeJS.WritableStream,
        );
      }
      pack.finalize();
    })().catch((error: unknown) => {
      pack.destroy(error as Error);
      throw error;
    });
    const [response] = await Promise.all([
      this.#prepare(
        {
          body: Readable.from(pack as AsyncIterable<Buffer>, { objectMode: false }),
          contentType: 'application/x-tar',
        },
        options,
      ),
      packed,
    ]);
    return response;
  }

  async #prepare(
    body: RequestOptions,
    options: { onProgress?: (progress: ImageProgress) => void },
  ): Promise<PrepareImageResponse> {
    if (options.onProgress === undefined) return this.#json('POST', '/v1/images', body);
    // Streamed: each step as the daemon takes it, then the result.
    const response = await this.raw('POST', '/v1/images', { ...body, query: { stream: 'ndjson' } });
    for await (const line of createInterface({ input: response, crlfDelay: Number.POSITIVE_INFINITY })) {
      if (line.trim() === '') continue;
      const event = JSON.parse(line) as ImageStreamEvent;
      if (event.type === 'progress') {
        const { type: _type, ...progress } = event;
        options.onProgress(progress);
      } else if (event.type === 'result') return event.result;
      else throw new GymError(event.error.code, event.error.message, { details: event.error.details });
    }
    throw new GymError('DAEMON_UNAVAILABLE', 'the daemon ended the image build without a result');
  }

  /** An image the provider has (its working directory included), or null. */
  async inspectImage(
    reference: string,
    options: { provider?: string } = {},
  ): Promise<ImageInfoResponse | null> {
    try {
      return await this.#json('GET', '/v1/images/inspect', {
        query: { reference, provider: options.provider },
      });
    } catch (error) {
      if (error instanceof GymError && error.code === 'IMAGE_NOT_FOUND') return null;
      throw error;
    }
  }

  async listPools(): Promise<PoolStats[]> {
    return (await this.#json<{ pools: PoolStats[] }>('GET', '/v1/pools')).pools;
  }

  getPool(name: string): Promise<PoolStats> {
    return this.#json('GET', `/v1/pools/${encodeURIComponent(name)}`);
  }

  async removePool(name: string): Promise<void> {
    await this.#json('DELETE', `/v1/pools/${encodeURIComponent(name)}`);
  }

  async listSandboxes(
    filter: { labels?: Record<string, string>; provider?: string } = {},
  ): Promise<Sandbox[]> {
    const label = Object.entries(filter.labels ?? {}).map(([key, value]) => `${key}=${value}`);
    const result = await this.#json<{ sandboxes: Sandbox[] }>('GET', '/v1/sandboxes', {
      query: { label, provider: filter.provider },
    });
    return result.sandboxes;
  }

  getSandbox(id: string): Promise<Sandbox> {
    return this.#json('GET', `/v1/sandboxes/${encodeURIComponent(id)}`);
  }

  async destroySandbox(id: string): Promise<void> {
    await this.#json('DELETE', `/v1/sandboxes/${encodeURIComponent(id)}`);
  }

  keepalive(id: string, ttlSeconds?: number): Promise<Sandbox> {
    return this.#json('POST', `/v1/sandboxes/${encodeURIComponent(id)}/keepalive`, {
      json: ttlSeconds === undefined ? {} : { ttlSeconds },
    });
  }

  exec(id: string, request: ExecRequestInput, options: IdempotentCallOptions = {}): Promise<ExecResult> {
    return this.#json('POST', `/v1/sandboxes/${encodeURIComponent(id)}/exec`, {
      json: request,
      idempotencyKey: keyOf(options),
    });
  }

  /** Streams output events as they come; the last event is the result (or an error). */
  async *execStream(
    id: string,
    request: ExecRequestInput,
    options: IdempotentCallOptions = {},
  ): AsyncGenerator<ExecStreamEvent> {
    const response = await this.raw('POST', `/v1/sandboxes/${encodeURIComponent(id)}/exec`, {
      json: request,
      query: { stream: 'ndjson' },
      idempotencyKey: keyOf(options),
    });
    for await (const line of createInterface({ input: response, crlfDelay: Number.POSITIVE_INFINITY })) {
      if (line.trim() !== '') yield JSON.parse(line) as ExecStreamEvent;
    }
  }

  async writeFile(
    id: string,
    path: string,
    content: Buffer | { stream: Readable; sizeBytes: number },
    mode?: number,
    options: IdempotentCallOptions = {},
  ): Promise<void> {
    const query = { path, ...(mode === undefined ? {} : { mode: mode.toString(8) }) };
    const isBuffer = Buffer.isBuffer(content);
    await this.#json('PUT', `/v1/sandboxes/${encodeURIComponent(id)}/files`, {
      query,
      body: isBuffer ? content : content.stream,
      contentType: 'application/octet-stream',
      ...(isBuffer ? {} : { contentLength: content.sizeBytes }),
      idempotencyKey: keyOf(options),
    });
  }

  /** The file's bytes as a stream. */
  readFile(id: string, path: string): Promise<Readable> {
    return this.raw('GET', `/v1/sandboxes/${encodeURIComponent(id)}/files`, { query: { path } });
  }

  /**
   * The file's bytes in memory, at most `maxBytes` of them: a larger file stops the download
   * (the connection is closed, nothing more is held) and throws FILE_TOO_LARGE.
   */
  async readFileBytes(id: string, path: string, options: { maxBytes: number }): Promise<Buffer> {
    const stream = await this.readFile(id, path);
    const chunks: Buffer[] = [];
    let total = 0;
    for await (const chunk of stream) {
      total += (chunk as Buffer).length;
      if (total > options.maxBytes) {
        stream.destroy();
        throw new GymError(
          'FILE_TOO_LARGE',
          `${path} in sandbox ${id} is larger than ${options.maxBytes} bytes, the most this reader accepts`,
          { details: { sandboxId: id, path, maxBytes: options.maxBytes } },
        );
      }
      chunks.push(chunk as Buffer);
    }
    return Buffer.concat(chunks, total);
  }

  async writeArchive(
    id: string,
    directory: string,
    archive: Readable | Buffer,
    options: IdempotentCallOptions = {},
  ): Promise<void> {
    await this.#json('PUT', `/v1/sandboxes/${encodeURIComponent(id)}/archive`, {
      query: { path: directory },
      body: archive,
      contentType: 'application/x-tar',
      idempotencyKey: keyOf(options),
    });
  }

  readArchive(id: string, directory: string): Promise<Readable> {
    return this.raw('GET', `/v1/sandboxes/${encodeURIComponent(id)}/archive`, { query: { path: directory } });
  }

  /**
   * Makes the model gateway reachable from inside the sandbox; answers the URL an agent there
   * uses (the same on every call, and after a daemon restart). Idempotent.
   */
  exposeGateway(id: string): Promise<{ url: string }> {
    return this.#json('POST', `/v1/sandboxes/${encodeURIComponent(id)}/gateway`, { json: {} });
  }

  /** A declared port's proxy path on the daemon and the headers (its port key) each request there needs. */
  portEndpoint(id: string, port: number): Promise<PortEndpoint> {
    return this.#json('GET', `/v1/sandboxes/${encodeURIComponent(id)}/ports/${port}`);
  }

  /** The latest output of the sandbox's service (its `entrypoint`), per stream. */
  serviceOutput(id: string): Promise<ServiceOutput> {
    return this.#json('GET', `/v1/sandboxes/${encodeURIComponent(id)}/service/output`);
  }

  /**
   * Sets the sandbox's egress policy (docs/egress.md): new connections follow it at once, open
   * ones are cut. Answers the policy now in force.
   * @throws GymError `FORBIDDEN_BY_CONFIG` when the daemon's egress configuration does not allow it.
   */
  setNetwork(id: string, policy: NetworkPolicyInput): Promise<NetworkView> {
    return this.#json('PUT', `/v1/sandboxes/${encodeURIComponent(id)}/network`, { json: policy });
  }

  /** Every attempt the sandbox made through the egress proxy, oldest first (bounded; `dropped` counts the rest). */
  networkLog(id: string): Promise<NetworkLog> {
    return this.#json('GET', `/v1/sandboxes/${encodeURIComponent(id)}/network/log`);
  }

  /** Opens a gateway rollout; its key is the API key an agent uses. */
  openRollout(
    options: {
      rolloutId?: string;
      upstream?: {
        baseUrl: string;
        apiKey?: string;
        model?: string;
        api?: 'openai' | 'anthropic';
        requestTokenIds?: boolean;
      };
      /** The sandbox whose agent makes the calls: calls from any other sandbox are refused. */
      sandboxId?: string;
    } = {},
  ): Promise<{
    rolloutId: string;
    key: string;
    basePath: string;
  }> {
    return this.#json('POST', '/v1/gateway/rollouts', { json: options });
  }

  async rolloutRecords(rolloutId: string): Promise<unknown[]> {
    return (
      await this.#json<{ records: unknown[] }>(
        'GET',
        `/v1/gateway/rollouts/${encodeURIComponent(rolloutId)}/records`,
      )
    ).records;
  }

  async closeRollout(rolloutId: string): Promise<void> {
    await this.#json('DELETE', `/v1/gateway/rollouts/${encodeURIComponent(rolloutId)}`);
  }

  /** The daemon's base URL (TCP), for building gateway endpoints. */
  get url(): string | undefined {
    return this.#options.url;
  }

  /**
   * Kills every process in the sandbox but its keeper; the sandbox stays ready.
   * @throws GymError `CAPABILITY_UNSUPPORTED` when its provider cannot.
   */
  stopProcesses(id: string): Promise<StopProcessesResult> {
    return this.#json('POST', `/v1/sandboxes/${encodeURIComponent(id)}/stop-processes`, { json: {} });
  }

  /**
   * Which files of a verifier's toolchain differ from the sandbox's image, seen from outside it.
   * @throws GymError `CAPABILITY_UNSUPPORTED` when its provider cannot.
   */
  checkToolchain(id: string, request: ToolchainCheckRequestInput = {}): Promise<ToolchainCheckResult> {
    return this.#json('POST', `/v1/sandboxes/${encodeURIComponent(id)}/toolchain-check`, { json: request });
  }

  /** Commits the sandbox to the named image (Docker, a name the operator allows). */
  snapshot(id: string, image: string): Promise<{ image: string }> {
    return this.#json('POST', `/v1/sandboxes/${encodeURIComponent(id)}/snapshot`, { json: { image } });
  }

  /**
   * A managed snapshot of the sandbox's files (labelled, reaped after its TTL); a spec starts
   * from it by naming its `image` (`snapshot:<id>`). `live`: its memory and processes too, where
   * the provider declares `liveFork` (`CAPABILITY_UNSUPPORTED` elsewhere).
   */
  async createSnapshot(
    id: string,
    options: { ttlSeconds?: number; labels?: Record<string, string>; live?: boolean } = {},
  ): Promise<SnapshotInfo> {
    const answer = await this.#json<{ image: string; snapshot?: SnapshotInfo }>(
      'POST',
      `/v1/sandboxes/${encodeURIComponent(id)}/snapshot`,
      { json: options },
    );
    if (answer.snapshot === undefined)
      throw new GymError('INTERNAL', 'the daemon answered a managed snapshot without its record');
    return answer.snapshot;
  }

  /**
   * `count` new sandboxes holding the parent's files at this moment, each with its own lease;
   * the parent keeps running. @throws GymError `CAPABILITY_UNSUPPORTED` for `live` where the
   * provider cannot carry processes over.
   */
  fork(
    id: string,
    request: ForkRequestInput,
    options: IdempotentCallOptions = {},
  ): Promise<{ snapshot: SnapshotInfo; sandboxes: Sandbox[] }> {
    return this.#json('POST', `/v1/sandboxes/${encodeURIComponent(id)}/fork`, {
      json: request,
      idempotencyKey: keyOf(options),
    });
  }

  async listSnapshots(): Promise<SnapshotInfo[]> {
    return (await this.#json<{ snapshots: SnapshotInfo[] }>('GET', '/v1/snapshots')).snapshots;
  }

  getSnapshot(id: string): Promise<SnapshotInfo> {
    return this.#json('GET', `/v1/snapshots/${encodeURIComponent(id)}`);
  }

  /** Removes a managed snapshot (idempotent: a missing one is success). */
  async deleteSnapshot(id: string): Promise<void> {
    await this.#json('DELETE', `/v1/snapshots/${encodeURIComponent(id)}`);
  }

  /**
   * Lends sandboxes: a scoped credential with `rights` on `sandboxIds`, expiring no later than
   * their leases (docs/api.md, "Scoped access"). Its `token` is shown this once; pass it as another
   * client's `token`. Needs the daemon's token.
   */
  grantAccess(request: AccessGrantRequest): Promise<AccessGrantCreated> {
    return this.#json('POST', '/v1/access', { json: request });
  }

  /** The live grants, without their credentials. Needs the daemon's token. */
  async listAccess(): Promise<AccessGrant[]> {
    return (await this.#json<{ grants: AccessGrant[] }>('GET', '/v1/access')).grants;
  }

  /** Revokes a grant (idempotent), with the daemon's token or the grant's own credential. */
  async revokeAccess(grantId: string): Promise<void> {
    await this.#json('DELETE', `/v1/access/${encodeURIComponent(grantId)}`);
  }

  async metrics(): Promise<string> {
    return (await readBody(await this.raw('GET', '/metrics'))).toString('utf8');
  }
}
