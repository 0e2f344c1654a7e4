/**
 * `/openapi.json` is derived from the routes: it lists exactly the routes the router holds, each
 * with the schemas the route declares, and every route it lists answers.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { VERSION } from '../core/version.ts';
import type { ProviderContext } from '../providers/sandbox-provider.ts';
import { startTestDaemon, type TestDaemon } from '../test/daemon-harness.ts';
import { MemoryProvider } from '../test/fixtures/memory-provider.ts';

interface Operation {
  summary?: string;
  tags?: string[];
  security?: unknown[];
  parameters?: Array<{ name: string; in: string; required?: boolean }>;
  requestBody?: { required?: boolean; content: Record<string, { schema?: Record<string, unknown> }> };
  responses: Record<string, { description: string; content?: Record<string, { schema?: unknown }> }>;
}
type Document = {
  openapi: string;
  info: { version: string };
  paths: Record<string, Record<string, Operation>>;
};

let daemon: TestDaemon;
let document: Document;

beforeAll(async () => {
  daemon = await startTestDaemon(
    { providers: [{ name: 'memory' }] },
    { factories: { memory: (_options: unknown, context: ProviderContext) => new MemoryProvider(context) } },
  );
  const response = await daemon.app.inject({ method: 'GET', url: '/openapi.json', headers: daemon.auth });
  expect(response.statusCode).toBe(200);
  document = response.json();
});

afterAll(async () => {
  await daemon?.cleanup();
});

/** `METHOD /path/{param}` of every route the router holds, read from fastify's own route tree. */
function routerRoutes(): string[] {
  const routes: string[] = [];
  const parents: string[] = [];
  for (const line of daemon.app.printRoutes({ commonPrefix: false }).split('\n')) {
    const match = /^((?:│ {3}| {4})*)[├└]── (\S+) \(([A-Z, ]+)\)$/.exec(line);
    if (match === null) continue;
    const depth = match[1]!.length / 4;
    const path = (parents[depth - 1] ?? '') + match[2]!;
    parents[depth] = path;
    parents.length = depth + 1;
    for (const method of match[3]!.split(', '))
      if (method !== 'HEAD')
        // fastify's tree prints a wildcard `/*` as `*`; the document names it `/{*}`.
        routes.push(`${method} ${path.replace(/:(\w+)/g, '{$1}').replace(/\/?\*$/, '/{*}')}`);
  }
  return routes;
}

function documentedRoutes(): string[] {
  return Object.entries(document.paths).flatMap(([path, item]) =>
    Object.keys(item).map((method) => `${method.toUpperCase()} ${path}`),
  );
}

describe('the OpenAPI document', () => {
  it('lists exactly the routes the router holds (a route added is documented without more)', () => {
    const routes = routerRoutes();
    expect(routes.length).toBeGreaterThan(40);
    expect(documentedRoutes().sort()).toEqual(routes.sort());
    // Routes the hand-written document once missed are there.
    expect(routes).toEqual(
      expect.arrayContaining([
        'POST /v1/gateway/{rolloutId}/v1/messages',
        'POST /v1/gateway/{rolloutId}/v1/messages/count_tokens',
        'POST /ui/login-links',
      ]),
    );
    expect(document.openapi).toBe('3.1.0');
    expect(document.info.version).toBe(VERSION);
  });

  it('gives every operation a summary and a described success, and every error the error shape', () => {
    for (const [path, item] of Object.entries(document.paths))
      for (const [method, operation] of Object.entries(item)) {
        const name = `${method} ${path}`;
        expect(operation.summary, name).toMatch(/\S/);
        const statuses = Object.keys(operation.responses);
        expect(
          statuses.some((status) => status.startsWith('2') || status.startsWith('3')),
          name,
        ).toBe(true);
        for (const [status, response] of Object.entries(operation.responses)) {
          expect(response.description, `${name} ${status}`).toMatch(/\S/);
          if (Number(status) < 400 || operation.tags?.includes('ui')) continue;
          const schema = response.content?.['application/json']?.schema as {
            properties?: { error?: { properties?: Record<string, unknown> } };
          };
          expect(Object.keys(schema?.properties?.error?.properties ?? {}), `${name} ${status}`).toEqual([
            'code',
            'message',
            'details',
          ]);
        }
      }
  });

  it('shows the schemas the routes declare, in their request (input) and answer (output) forms', () => {
    const create = document.paths['/v1/sandboxes']!.post!;
    const createBody = create.requestBody!.content['application/json']!.schema as {
      anyOf: Array<{ properties: Record<string, unknown> }>;
    };
    expect(createBody.anyOf[0]!.properties).toHaveProperty('image');
    expect(createBody.anyOf[1]!.properties).toHaveProperty('pool');
    const exec = document.paths['/v1/sandboxes/{id}/exec']!.post!;
    expect(Object.keys(exec.responses['200']!.content!)).toEqual([
      'application/json',
      'application/x-ndjson',
    ]);
    expect(exec.parameters).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ name: 'stream', in: 'query' }),
        expect.objectContaining({ name: 'id', in: 'path', required: true }),
      ]),
    );
    // A body a route takes without one is optional; raw uploads say their media type.
    expect(document.paths['/v1/sandboxes/{id}/keepalive']!.post!.requestBody!.required).toBe(false);
    expect(document.paths['/v1/sandboxes/{id}/fork']!.post!.requestBody!.required).toBe(true);
    expect(Object.keys(document.paths['/v1/sandboxes/{id}/files']!.put!.requestBody!.content)).toEqual([
      'application/octet-stream',
    ]);
    expect(document.paths['/healthz']!.get!.security).toEqual([]);
    expect(document.paths['/v1/gateway/{rolloutId}/v1/responses']!.post!.security).toEqual([
      { rolloutKey: [] },
    ]);
    // A discriminated union keeps its constants (the Python generator names its members by them).
    const events = exec.responses['200']!.content!['application/x-ndjson']!.schema as {
      oneOf?: Array<{ properties: { type: Record<string, unknown> } }>;
      anyOf?: Array<{ properties: { type: Record<string, unknown> } }>;
    };
    expect((events.oneOf ?? events.anyOf)!.map((event) => event.properties.type.const)).toContain('result');
  });

  it('answers on every route it lists (none is unknown to the router)', async () => {
    const filled = (path: string) =>
      path.replace('{id}', 'sbx-abcdefgh').replace('{name}', 'nopool').replace('{rolloutId}', 'no-rollout');
    const codeOf = async (method: string, url: string) => {
      const response = await daemon.app.inject({ method: method as 'GET', url, headers: daemon.auth });
      return response.headers['content-type']?.includes('json') === true
        ? (response.json() as { error?: { code?: string } }).error?.code
        : `${response.statusCode}`;
    };
    // What a route the router does not hold answers:
    expect(await codeOf('GET', '/v1/not-a-route')).toBe('ROUTE_NOT_FOUND');
    for (const route of documentedRoutes()) {
      const [method, path] = route.split(' ') as [string, string];
      expect(await codeOf(method, filled(path)), route).not.toBe('ROUTE_NOT_FOUND');
    }
  });
});
