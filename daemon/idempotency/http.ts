/**
 * The `Idempotency-Key` header on the routes that change things (create, fork, exec, file and
 * archive writes; docs/api.md, "Safe retries"). A route opts in with `config.idempotent`:
 * `json` (its body is parsed JSON, fingerprinted before it runs) or `stream` (its body streams to
 * the sandbox and is fingerprinted as it passes, through {@link requestBody}).
 *
 * With the header, before the route runs (after the credential is checked): a key never seen
 * begins an entry; a key seen with another request is IDEMPOTENCY_KEY_MISMATCH (422); a key whose
 * request is running waits for it; a key whose request ran gets its answer again, marked
 * `idempotent-replayed: true`, and the route does not run; a key whose request was cut off by a
 * restart is IDEMPOTENT_OUTCOME_UNKNOWN (409). An answer below 500 that is not a success (the
 * request was refused before it did anything: a bad body, an unknown sandbox, no capacity)
 * frees the key; a success or a 5xx (it may have taken effect) is kept.
 */
import { createHash, type Hash } from 'node:crypto';
import { type Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import { GymError } from '../../core/errors.ts';
import { entryId, type IdempotencyStore, sha256 } from './store.ts';

export const IDEMPOTENCY_HEADER = 'idempotency-key';
/** Printable ASCII without spaces, up to 255 characters (a UUID fits many times over). */
const KEY_PATTERN = /^[\x21-\x7e]{1,255}$/;

/** The header as routes declare it to the OpenAPI document. */
export const IdempotencyHeadersSchema = z.object({
  [IDEMPOTENCY_HEADER]: z
    .string()
    .regex(KEY_PATTERN)
    .optional()
    .describe(
      'a key of your choosing (a UUID): a repeat of the request with the same key gets the first answer and does not run again (docs/api.md, "Safe retries")',
    ),
});

export type IdempotentBody = 'json' | 'stream';

/** How a route takes a key: its body's kind, and whether its begin is synced to disk first. */
export interface IdempotentRoute {
  body: IdempotentBody;
  /** A create or a fork (a duplicate costs a sandbox): survive a host crash too. */
  synced: boolean;
}

interface IdempotentRun {
  id: string;
  body: string | null;
  /** The streamed body's hash as it passes; complete once the body was read to its end. */
  hash?: { hash: Hash; complete: boolean };
  closed: boolean;
}

declare module 'fastify' {
  interface FastifyContextConfig {
    /** This route takes an `Idempotency-Key` (routes/sandboxes.ts). */
    idempotent?: IdempotentRoute;
  }
  interface FastifyRequest {
    /** The idempotent run this request began (absent without a key, or when it was replayed). */
    idempotency?: IdempotentRun;
  }
}

function presentedKey(request: FastifyRequest): string | undefined {
  const value = request.headers[IDEMPOTENCY_HEADER];
  if (value === undefined) return undefined;
  if (typeof value !== 'string' || !KEY_PATTERN.test(value))
    throw new GymError(
      'VALIDATION_FAILED',
      'invalid Idempotency-Key header: one key of 1 to 255 printable ASCII characters, no spaces',
      { details: { issues: [{ path: IDEMPOTENCY_HEADER, message: 'one key, [\\x21-\\x7e]{1,255}' }] } },
    );
  return value;
}

/** Who holds the key: the daemon token, or one scoped grant (never another's). */
function ownerOf(request: FastifyRequest): string {
  return request.accessGrant === undefined ? 'token' : `grant-${sha256(request.accessGrant.id).slice(0, 16)}`;
}

function sortedJson(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value ?? null);
  const entries = Object.entries(value as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : 1));
  return JSON.stringify(entries);
}

/** What the request is, but for its body: method, route, path parameters and query. */
function describeRequest(request: FastifyRequest): string {
  return sha256(
    [request.method, request.routeOptions.url, sortedJson(request.params), sortedJson(request.query)].join(
      '\n',
    ),
  );
}

async function hashOfRest(stream: Readable): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of stream) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

function mismatch(): GymError {
  return new GymError(
    'IDEMPOTENCY_KEY_MISMATCH',
    'this Idempotency-Key was sent before with a different request (route, sandbox, query or body); use a new key for a new request',
  );
}

/**
 * The body of a `stream` route, to read instead of `request.raw`: with a key it passes through a
 * hash, so a repeat can be told from a different request.
 */
export function requestBody(request: FastifyRequest): Readable {
  const run = request.idempotency;
  if (run?.hash === undefined) return request.raw;
  const tracked = run.hash;
  const tee = new Transform({
    transform(chunk: Buffer, _encoding, done) {
      tracked.hash.update(chunk);
      done(null, chunk);
    },
    flush(done) {
      tracked.complete = true;
      done();
    },
  });
  pipeline(request.raw, tee).catch(() => {});
  return tee;
}

/** Records the answer of a request that began a run (the streamed exec calls this itself). */
export function completeRun(
  store: IdempotencyStore,
  request: FastifyRequest,
  status: number,
  contentType: string,
  /** The answer's text; null for one that is not text (a stream), which is not kept. */
  body: string | null,
): void {
  const run = request.idempotency;
  if (run === undefined || run.closed) return;
  run.closed = true;
  const refused = status < 500 && (status < 200 || status >= 300);
  if (refused) {
    store.forget(run.id);
    return;
  }
  const bodyHash = run.hash === undefined ? run.body : run.hash.complete ? run.hash.hash.digest('hex') : null;
  store.finish(run.id, bodyHash, body === null ? null : { status, contentType, body });
}

/**
 * Answers a repeat, or begins the request: `began` resolves once its begin line is written. The
 * lookup that finds no entry and the begin run with no await between them, so of repeats that
 * wake together (the first was refused and freed its key) exactly one begins; the others wait on it.
 */
async function replayOrBegin(
  store: IdempotencyStore,
  request: FastifyRequest,
  reply: FastifyReply,
  route: IdempotentRoute,
  owner: string,
  id: string,
  described: string,
  body: string | null,
): Promise<{ replayed: true } | { replayed: false; began: Promise<void> }> {
  const mode = route.body;
  for (;;) {
    const entry = store.get(id);
    if (entry === undefined)
      return { replayed: false, began: store.begin(id, owner, described, body, route.synced) };
    if (entry.request !== described || (body !== null && entry.body !== null && entry.body !== body))
      throw mismatch();
    if (entry.state.kind === 'running') {
      entry.waiting += 1;
      await entry.state.settled;
      entry.waiting -= 1;
      continue;
    }
    if (mode === 'stream') {
      const streamed = await hashOfRest(request.raw);
      if (entry.body !== null && entry.body !== streamed) throw mismatch();
    }
    if (entry.state.kind === 'interrupted')
      throw new GymError(
        'IDEMPOTENT_OUTCOME_UNKNOWN',
        'the request first sent with this Idempotency-Key began, and the daemon stopped before it answered: it may or may not have taken effect, and it is not run again; look at the sandbox, then send a new key',
        { details: { reason: 'interrupted', startedAt: new Date(entry.startedAt).toISOString() } },
      );
    const answer = entry.state.answer;
    if (answer === null)
      throw new GymError(
        'IDEMPOTENT_OUTCOME_UNKNOWN',
        'the request first sent with this Idempotency-Key ran, and its answer was too large to keep (or was dropped for room): it is not run again',
        { details: { reason: 'answer-not-kept', startedAt: new Date(entry.startedAt).toISOString() } },
      );
    reply.status(answer.status).header('idempotent-replayed', 'true').type(answer.contentType);
    await reply.send(answer.body);
    return { replayed: true };
  }
}

export function registerIdempotency(app: FastifyInstance, store: IdempotencyStore): void {
  app.addHook('preHandler', async (request, reply) => {
    const route = request.routeOptions.config.idempotent;
    if (route === undefined) return;
    const mode = route.body;
    const key = presentedKey(request);
    if (key === undefined) return;
    const owner = ownerOf(request);
    const id = entryId(owner, key);
    const described = describeRequest(request);
    const body = mode === 'json' ? sha256(JSON.stringify(request.body ?? null)) : null;
    const outcome = await replayOrBegin(store, request, reply, route, owner, id, described, body);
    if (outcome.replayed) return reply;
    await outcome.began;
    request.idempotency = {
      id,
      body,
      ...(mode === 'stream' ? { hash: { hash: createHash('sha256'), complete: false } } : {}),
      closed: false,
    };
  });

  app.addHook('onSend', async (request, reply, payload) => {
    if (request.idempotency === undefined || request.idempotency.closed) return payload;
    const type = reply.getHeader('content-type');
    completeRun(
      store,
      request,
      reply.statusCode,
      typeof type === 'string' ? type : 'application/json',
      typeof payload === 'string'
        ? payload
        : Buffer.isBuffer(payload)
          ? payload.toString('utf8')
          : payload === undefined || payload === null
            ? ''
            : null,
    );
    return payload;
  });

  // A request whose answer was never recorded (its reply cut off) cannot be answered again.
  app.addHook('onResponse', async (request) => {
    const run = request.idempotency;
    if (run === undefined || run.closed) return;
    run.closed = true;
    store.interrupt(run.id);
  });
}
