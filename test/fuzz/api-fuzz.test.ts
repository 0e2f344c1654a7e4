/**
 * Fuzzes every route of the HTTP API (as the OpenAPI document lists them) with random, malformed
 * and oversized paths, query strings, headers and bodies, against the in-memory provider, and the
 * listening socket with malformed HTTP. Properties: no 5xx but the documented provider and
 * upstream failures, every error in our shape with its code's status, no request that hangs, the
 * daemon answers /healthz afterwards, and nothing it created is left once everything is deleted.
 * Budget and replay: test/fuzz/budget.ts.
 */
import { METHODS as HTTP_METHODS } from 'node:http';
import { connect } from 'node:net';
import fc from 'fast-check';
import type { InjectOptions, LightMyRequestResponse } from 'fastify';
import { afterAll, describe, expect, it } from 'vitest';
import { ERROR_CODES, type ErrorCode } from '../../core/errors.ts';
import type { ProviderContext } from '../../providers/sandbox-provider.ts';
import { startTestDaemon, type TestDaemon } from '../daemon-harness.ts';
import { MemoryProvider } from '../fixtures/memory-provider.ts';
import { fuzzParameters, fuzzTimeout } from './budget.ts';

/** 5xx answers that report a backend's failure rather than a daemon bug (core/errors.ts). */
const DOCUMENTED_5XX = new Set<ErrorCode>([
  'PROVIDER_UNAVAILABLE',
  'PROVIDER_ERROR',
  'PROVIDER_TIMEOUT',
  'SANDBOX_START_FAILED',
  'CAPABILITY_UNSUPPORTED',
  'MODEL_UPSTREAM_ERROR',
  'GATEWAY_LOOP',
]);
/** A request that takes longer than this against an in-memory provider is a hang. */
const REQUEST_DEADLINE_MS = 5_000;
/** Over the API's 16 MiB JSON body limit. */
const OVERSIZED_BODY = Buffer.alloc(16 * 1024 * 1024 + 1, 0x61);
const METHODS = ['GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'HEAD', 'OPTIONS'] as const;

interface Route {
  method: (typeof METHODS)[number];
  template: string;
}

/** Every method and path the daemon's OpenAPI document lists: a route added is fuzzed without more. */
async function documentedRoutes(): Promise<Route[]> {
  const document = await daemon.app.inject({ method: 'GET', url: '/openapi.json', headers: daemon.auth });
  const paths = document.json().paths as Record<string, Record<string, { tags?: string[] }>>;
  return Object.entries(paths).flatMap(([template, item]) =>
    Object.keys(item)
      .filter((key) => (METHODS as readonly string[]).includes(key.toUpperCase()))
      // The /ui page's routes answer a browser in plain text, not the API's error shape (routes/ui.test.ts).
      .filter((key) => item[key]?.tags?.includes('ui') !== true)
      .map((method) => ({ method: method.toUpperCase() as Route['method'], template })),
  );
}

let daemon: TestDaemon;
let provider: MemoryProvider;
/** A sandbox that exists (re-created when a fuzzed DELETE removed it). */
let liveId = '';
/** A gateway rollout that exists, whose upstream is a closed loopback port. */
let rollout = { rolloutId: '', key: '' };

async function ensureLiveSandbox(): Promise<void> {
  if (provider.sandboxes.has(liveId)) return;
  const response = await daemon.app.inject({
    method: 'POST',
    url: '/v1/sandboxes',
    headers: daemon.auth,
    payload: { image: 'img', labels: { fuzz: 'live' } },
  });
  expect(response.statusCode, response.body).toBe(201);
  liveId = response.json().id;
}

async function ensureRollout(): Promise<void> {
  const records = await daemon.app.inject({
    method: 'GET',
    url: `/v1/gateway/rollouts/${rollout.rolloutId || 'none'}/records`,
    headers: daemon.auth,
  });
  if (records.statusCode === 200) return;
  const response = await daemon.app.inject({
    method: 'POST',
    url: '/v1/gateway/rollouts',
    headers: daemon.auth,
    payload: { upstream: { baseUrl: 'http://127.0.0.1:9/v1', apiKey: 'k', model: 'm' } },
  });
  expect(response.statusCode, response.body).toBe(201);
  rollout = response.json();
}

// ---- generators ----

const weirdText = fc.oneof(
  fc.string({ maxLength: 40 }),
  fc.string({ unit: 'grapheme', maxLength: 20 }),
  fc.string({ unit: 'binary', maxLength: 20 }),
  fc.constantFrom(
    '..',
    '.',
    '%',
    '%00',
    '%2e%2e',
    '%2F',
    '%ZZ',
    '..%2f..%2fetc',
    '\u0000',
    '~',
    '*',
    '?x',
    '#x',
  ),
  // Stands for 10,000 characters (tokens keep counterexamples short; see substitute()).
  fc.constant('<long>'),
);

/** A value for a path parameter: sometimes the real thing, often not. */
function parameterValue(name: string): fc.Arbitrary<string> {
  const real =
    name === 'id'
      ? fc.constant('<live>')
      : name === 'rolloutId'
        ? fc.constant('<rollout>')
        : fc.constantFrom('p1', 'warm');
  const plausible =
    name === 'id' ? fc.stringMatching(/^sbx-[a-z0-9]{8,32}$/) : fc.stringMatching(/^[A-Za-z0-9._-]{1,40}$/);
  return fc.oneof({ weight: 3, arbitrary: real }, { weight: 2, arbitrary: plausible }, weirdText);
}

/** Percent-encodes most values; leaves some raw so the router sees malformed escapes too. */
const encodeSegment = (value: string, raw: boolean) =>
  raw ? value.replace(/[/?#\s]/g, '_') : encodeURIComponent(value);

const queryKey = fc.oneof(
  fc.constantFrom('path', 'mode', 'stream', 'label', 'provider', 'constructor', '__proto__'),
  fc.string({ maxLength: 12 }),
);
const queryValue = fc.oneof(
  fc.constantFrom(
    '/',
    '/work',
    '/etc/passwd',
    '/a/../../b',
    'relative',
    '755',
    '0644',
    '9999',
    'ndjson',
    'a=b',
    '=',
    '',
  ),
  weirdText,
);
const queryString = fc.oneof(
  fc.constant(''),
  fc
    .array(fc.tuple(queryKey, queryValue, fc.boolean()), { maxLength: 5 })
    .map((pairs) =>
      pairs
        .map(([key, value, raw]) =>
          raw
            ? `${key.replace(/[#\s]/g, '_')}=${value.replace(/[#\s]/g, '_')}`
            : `${encodeURIComponent(key)}=${encodeURIComponent(value)}`,
        )
        .join('&'),
    ),
);

/** Values shaped like the API's fields, and not. */
const fieldValue: fc.Arbitrary<unknown> = fc.oneof(
  fc.jsonValue({ maxDepth: 3 }),
  fc.constantFrom(
    'img',
    'missing',
    '/work',
    'sh',
    'bash',
    1,
    0,
    -1,
    1e308,
    2 ** 53,
    0.5,
    'ndjson',
    null,
    true,
  ),
  fc.array(fc.string({ maxLength: 10 }), { maxLength: 4 }),
  fc.dictionary(fc.string({ maxLength: 8 }), fc.string({ maxLength: 8 }), { maxKeys: 4 }),
  fc.constant('<long-field>'),
);
const FIELD_NAMES = [
  'image',
  'labels',
  'env',
  'ttlSeconds',
  'provider',
  'user',
  'workdir',
  'files',
  'resources',
  'network',
  'providerOptions',
  'readinessProbe',
  'pool',
  'argv',
  'command',
  'cwd',
  'stdin',
  'stdinEncoding',
  'timeoutMs',
  'maxOutputBytes',
  'session',
  'rolloutId',
  'upstream',
  'spec',
  'minIdle',
  'maxIdle',
  'maxTotal',
  'idleTtlSeconds',
  'refillConcurrency',
  'model',
  'messages',
  'stream',
  'input',
  '__proto__',
  'constructor',
] as const;
const objectBody = fc
  .dictionary(fc.oneof(fc.constantFrom(...FIELD_NAMES), fc.string({ maxLength: 8 })), fieldValue, {
    maxKeys: 6,
  })
  .map((body) => JSON.stringify(body));

interface Body {
  payload?: string | Buffer;
  contentType?: string;
}

const body: fc.Arbitrary<Body> = fc.oneof(
  { weight: 2, arbitrary: fc.constant({}) },
  { weight: 6, arbitrary: objectBody.map((payload) => ({ payload, contentType: 'application/json' })) },
  fc
    .jsonValue()
    .map((value) => ({ payload: JSON.stringify(value) ?? 'null', contentType: 'application/json' })),
  fc
    .tuple(
      fc.oneof(
        fc.string({ maxLength: 200 }),
        fc.uint8Array({ maxLength: 2048 }).map((bytes) => Buffer.from(bytes)),
      ),
      fc.constantFrom(
        'application/json',
        'application/json; charset=utf-16',
        'application/octet-stream',
        'application/x-tar',
        'text/plain',
        'multipart/form-data; boundary=x',
        'application/x-www-form-urlencoded',
        ';;;',
        '',
      ),
    )
    .map(([payload, contentType]) => ({ payload, contentType })),
  {
    weight: 1,
    arbitrary: fc
      .constantFrom('application/json', 'application/octet-stream')
      .map((contentType) => ({ payload: '<oversized>', contentType })),
  },
);

/** Mostly the daemon token (to reach past the auth hook), by a plain draw that fast-check's bias leaves alone. */
const OTHER_AUTHORIZATIONS = ['rollout', 'none', 'wrong', 'Bearer', 'Basic x'] as const;
const authorization = fc
  .noBias(fc.integer({ min: 0, max: 99 }))
  .map((draw) => (draw < 80 ? 'token' : OTHER_AUTHORIZATIONS[draw % OTHER_AUTHORIZATIONS.length]!));
const extraHeaders = fc.dictionary(
  fc.oneof(
    fc.constantFrom(
      'x-api-key',
      'x-gym-gateway-hop',
      'accept',
      'accept-encoding',
      'transfer-encoding',
      'expect',
      'x-forwarded-for',
      'cookie',
    ),
    fc.stringMatching(/^[a-z][a-z0-9-]{0,20}$/),
  ),
  fc.oneof(
    fc.stringMatching(/^[\x20-\x7e]{0,60}$/),
    fc.constantFrom('gzip', 'chunked', '100-continue', '*/*'),
  ),
  { maxKeys: 3 },
);

interface FuzzRequest {
  method: string;
  segments: Array<{ value: string; raw: boolean }>;
  query: string;
  body: Body;
  authorization: string;
  headers: Record<string, string>;
}

function requestFor(route: Route): fc.Arbitrary<FuzzRequest> {
  const parts = route.template.split('/').slice(1);
  const segments = parts.map((part) => {
    const match = /^\{(\w+)\}$/.exec(part);
    return match === null
      ? fc.constant({ value: part, raw: true })
      : fc.record({ value: parameterValue(match[1]!), raw: fc.boolean() });
  });
  return fc.record({
    method: fc.oneof({ weight: 5, arbitrary: fc.constant(route.method) }, fc.constantFrom(...METHODS)),
    segments: fc.tuple(...segments),
    query: queryString,
    body,
    authorization,
    headers: extraHeaders,
  });
}

/** Entirely random paths: extra or missing segments, traversal, encodings. */
const anyRequest: fc.Arbitrary<FuzzRequest> = fc.record({
  method: fc.oneof(fc.constantFrom(...METHODS), fc.constantFrom(...HTTP_METHODS)),
  segments: fc.array(
    fc.record({
      value: fc.oneof(
        fc.constantFrom('v1', 'sandboxes', 'gateway', 'pools', 'files', 'exec', '<live>', '..', '.'),
        weirdText,
      ),
      raw: fc.boolean(),
    }),
    { maxLength: 7 },
  ),
  query: queryString,
  body,
  authorization,
  headers: extraHeaders,
});

// ---- the check ----

const TOKENS: Record<string, () => string> = {
  '<live>': () => liveId,
  '<rollout>': () => rollout.rolloutId,
  '<long>': () => 'x'.repeat(10_000),
  '<long-field>': () => 'y'.repeat(100_000),
};

function substitute(value: string): string {
  return value.replace(/<live>|<rollout>|<long>|<long-field>/g, (token) => TOKENS[token]!());
}

function toInject(request: FuzzRequest): InjectOptions {
  const path = `/${request.segments.map((segment) => encodeSegment(substitute(segment.value), segment.raw)).join('/')}`;
  const headers: Record<string, string> = { ...request.headers };
  if (request.authorization === 'token') headers.authorization = daemon.auth.authorization;
  else if (request.authorization === 'rollout') headers.authorization = `Bearer ${rollout.key}`;
  else if (request.authorization !== 'none')
    headers.authorization = request.authorization === 'wrong' ? 'Bearer nope' : request.authorization;
  if (request.body.contentType !== undefined) headers['content-type'] = request.body.contentType;
  return {
    method: request.method as InjectOptions['method'],
    url: request.query === '' ? path : `${path}?${request.query}`,
    headers,
    ...(request.body.payload === undefined
      ? {}
      : {
          payload:
            request.body.payload === '<oversized>'
              ? OVERSIZED_BODY
              : typeof request.body.payload === 'string'
                ? substitute(request.body.payload)
                : request.body.payload,
        }),
  };
}

async function injectWithDeadline(
  options: InjectOptions,
): Promise<LightMyRequestResponse | 'client-refused'> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(
      () => reject(new Error(`no answer in ${REQUEST_DEADLINE_MS} ms: ${options.method} ${options.url}`)),
      REQUEST_DEADLINE_MS,
    );
  });
  try {
    return await Promise.race([daemon.app.inject(options), deadline]);
  } catch (error) {
    // light-my-request refuses some inputs itself (an invalid header value) before the server sees them.
    if (error instanceof TypeError && /header|URL|method/i.test(error.message)) return 'client-refused';
    throw error;
  } finally {
    clearTimeout(timer);
  }
}

function checkResponse(options: InjectOptions, response: LightMyRequestResponse): void {
  const where = `${options.method} ${String(options.url).slice(0, 200)} -> ${response.statusCode} ${response.body.slice(0, 300)}`;
  if (response.statusCode < 400) return;
  if (options.method === 'HEAD') {
    // No body to read the code from: the status must be one a documented failure has.
    const documented: number[] = [...DOCUMENTED_5XX].map((code) => ERROR_CODES[code].httpStatus);
    expect(response.statusCode < 500 || documented.includes(response.statusCode), where).toBe(true);
    return;
  }
  let parsed: { error?: { code?: string; message?: unknown } };
  try {
    parsed = response.json();
  } catch {
    throw new Error(`an error that is not JSON: ${where}`);
  }
  const code = parsed.error?.code as ErrorCode | undefined;
  expect(code !== undefined && code in ERROR_CODES, `an error without a known code: ${where}`).toBe(true);
  expect(typeof parsed.error?.message, where).toBe('string');
  expect(response.statusCode, `status of ${code}: ${where}`).toBe(ERROR_CODES[code!].httpStatus);
  if (response.statusCode >= 500)
    expect(DOCUMENTED_5XX.has(code!), `an undocumented 5xx: ${where}`).toBe(true);
}

/** What the fuzzed requests got, by status and code: printed, and checked to reach past validation. */
const outcomes = new Map<string, number>();

async function runOne(request: FuzzRequest): Promise<void> {
  await ensureLiveSandbox();
  await ensureRollout();
  const options = toInject(request);
  const response = await injectWithDeadline(options);
  if (response === 'client-refused') return;
  checkResponse(options, response);
  const code = response.statusCode >= 400 && options.method !== 'HEAD' ? response.json().error.code : '';
  const key = `${response.statusCode} ${code}`.trim();
  outcomes.set(key, (outcomes.get(key) ?? 0) + 1);
}

async function healthy(): Promise<void> {
  const response = await daemon.app.inject({ method: 'GET', url: '/healthz' });
  expect(response.statusCode).toBe(200);
  expect(response.json()).toEqual({ ok: true });
}

// Started before the tests are collected: the routes to fuzz come from its document.
daemon = await startTestDaemon(
  // A small cap and a short queue: fuzzed creates are refused with 429 rather than waiting.
  { providers: [{ name: 'memory', maxLiveSandboxes: 40, queueSize: 4, queueTimeoutMs: 200 }] },
  {
    listen: true,
    factories: {
      memory: (_options: unknown, context: ProviderContext) => {
        provider = new MemoryProvider(context);
        return provider;
      },
    },
  },
);

afterAll(async () => {
  await daemon?.cleanup();
});

const routes = await documentedRoutes();

describe('API fuzzing', () => {
  it('knows every route the server has', () => {
    const served = routes.filter((route) =>
      daemon.app.hasRoute({
        method: route.method,
        // The port proxy's wildcard, `{*}` in the document, is fastify's `*`.
        url: route.template.replace('{*}', '*').replace(/\{(\w+)\}/g, ':$1'),
      }),
    );
    expect(served).toEqual(routes);
    expect(routes.length).toBeGreaterThan(20);
  });

  it.each(routes.map((route, index) => [`${route.method} ${route.template}`, route, index] as const))(
    '%s: malformed requests get a 4xx or a documented answer, never a 5xx or a hang',
    { timeout: fuzzTimeout(30_000) },
    async (name, route, index) => {
      await fc.assert(
        fc.asyncProperty(requestFor(route), runOne),
        fuzzParameters(`api ${name}`, 25, index + 1),
      );
      await healthy();
    },
  );

  it('random paths and methods', { timeout: fuzzTimeout(30_000) }, async () => {
    await fc.assert(fc.asyncProperty(anyRequest, runOne), fuzzParameters('api random paths', 60, 1000));
    await healthy();
  });

  it('malformed HTTP on the socket gets a 4xx or a closed connection', {
    timeout: fuzzTimeout(30_000),
  }, async () => {
    const address = daemon.app.server.address();
    if (address === null || typeof address === 'string')
      throw new Error('the test daemon does not listen on TCP');
    const requestLine = fc.tuple(
      fc.oneof(fc.constantFrom('GET', 'POST', 'PUT'), fc.string({ maxLength: 10 })),
      fc.oneof(fc.constantFrom('/healthz', '/v1/sandboxes', `/v1/sandboxes/<live>/exec`), weirdText),
      fc.constantFrom('HTTP/1.1', 'HTTP/1.0', 'HTTP/2.0', 'HTTP/9', '', 'http/1.1'),
    );
    const headerLine = fc.oneof(
      fc.constantFrom(
        'Content-Length: -1',
        'Content-Length: 99999999999999999999',
        'Content-Length: 5\r\nContent-Length: 6',
        'Transfer-Encoding: chunked',
        'Transfer-Encoding: chunked, identity',
        'Content-Type: application/json',
        `Authorization: ${daemon.auth.authorization}`,
        'Host:',
        ' folded',
        'X: \u0000',
        `X-Big: ${'h'.repeat(20_000)}`,
      ),
      fc.string({ maxLength: 40 }),
    );
    const message = fc.tuple(
      requestLine,
      fc.array(headerLine, { maxLength: 5 }),
      fc.string({ maxLength: 100 }),
    );
    await fc.assert(
      fc.asyncProperty(message, async ([[method, path, version], headers, payload]) => {
        await ensureLiveSandbox();
        const text = `${method} ${substitute(path)} ${version}\r\n${headers.join('\r\n')}\r\n\r\n${payload}`;
        const answer = await rawExchange(address.port, text);
        const status = /^HTTP\/1\.[01] (\d{3})/.exec(answer)?.[1];
        if (status === undefined) return;
        if (Number(status) < 500) return;
        const code = /"code":"([A-Z_]+)"/.exec(answer)?.[1] as ErrorCode | undefined;
        expect(
          code !== undefined && DOCUMENTED_5XX.has(code),
          `an undocumented ${status}: ${answer.slice(0, 300)}`,
        ).toBe(true);
      }),
      fuzzParameters('api raw socket', 40, 2000),
    );
    await healthy();
  });

  it('reached past authentication and validation', () => {
    console.log(`[fuzz] api outcomes: ${JSON.stringify(Object.fromEntries([...outcomes].sort()))}`);
    const statuses = new Set([...outcomes.keys()].map((key) => key.slice(0, 1)));
    expect([...statuses].sort()).toEqual(expect.arrayContaining(['2', '4']));
    for (const code of ['UNAUTHORIZED', 'VALIDATION_FAILED', 'SANDBOX_NOT_FOUND', 'ROUTE_NOT_FOUND'])
      expect(
        [...outcomes.keys()].some((key) => key.endsWith(code)),
        code,
      ).toBe(true);
  });

  it('leaves nothing behind once every pool, rollout and sandbox is deleted', async () => {
    const pools = (
      await daemon.app.inject({ method: 'GET', url: '/v1/pools', headers: daemon.auth })
    ).json() as {
      pools: Array<{ name: string }>;
    };
    for (const pool of pools.pools) {
      const removed = await daemon.app.inject({
        method: 'DELETE',
        url: `/v1/pools/${pool.name}`,
        headers: daemon.auth,
      });
      expect(removed.statusCode, removed.body).toBe(204);
    }
    const listed = (
      await daemon.app.inject({ method: 'GET', url: '/v1/sandboxes', headers: daemon.auth })
    ).json() as {
      sandboxes: Array<{ id: string }>;
    };
    for (const sandbox of listed.sandboxes) {
      const removed = await daemon.app.inject({
        method: 'DELETE',
        url: `/v1/sandboxes/${sandbox.id}`,
        headers: daemon.auth,
      });
      expect(removed.statusCode, removed.body).toBe(204);
    }
    expect(daemon.manager.lifecycle.list({})).toEqual([]);
    expect([...provider.sandboxes.keys()]).toEqual([]);
    await healthy();
  });
});

/** Writes `text` on a fresh connection, half-closes, and returns whatever comes back (bounded in time). */
function rawExchange(port: number, text: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: '127.0.0.1', port });
    const chunks: Buffer[] = [];
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`the server neither answered nor closed in ${REQUEST_DEADLINE_MS} ms`));
    }, REQUEST_DEADLINE_MS);
    socket.on('data', (chunk) => chunks.push(chunk));
    socket.on('error', () => {});
    socket.on('close', () => {
      clearTimeout(timer);
      resolve(Buffer.concat(chunks).toString('latin1'));
    });
    socket.end(text);
  });
}
