/**
 * `/ui`: a page of the daemon's sandboxes and pools for a person, behind the daemon's token
 * without the token ever being in a URL (URLs end up in logs, shell history and browser history).
 *
 * A holder of the token asks `POST /ui/login-links` (bearer token) for a login link: a random
 * nonce, good once and for {@link LOGIN_LINK_TTL_MS}. Opening it sets a session cookie (HttpOnly,
 * SameSite=Strict, Path=/ui) and redirects to the page. The cookie is accepted on the /ui routes
 * alone, which only read: it never authorizes the API, so a page the session opens cannot make
 * the daemon create, exec or delete anything.
 */
import { randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import { cookieValue, PAGE_HEADERS, sameSecret, sessionCookie } from '../../core/page-security.ts';
import { BYTES, contentAnswer, emptyAnswer, jsonAnswer } from '../openapi.ts';
import type { PoolManager } from '../pools/pool-manager.ts';
import type { SandboxLifecycle } from '../sandboxes/lifecycle.ts';

/** Long enough to paste the link into a browser; short enough that a logged link is stale. */
export const LOGIN_LINK_TTL_MS = 60_000;
/** A working day; the page asks for a new link after it. */
export const UI_SESSION_TTL_MS = 8 * 60 * 60 * 1000;
/** Unused links kept at most, so asking for links in a loop cannot grow the daemon's memory. */
const MAX_PENDING_LINKS = 64;
const MAX_SESSIONS = 256;
const SESSION_COOKIE = 'gym_ui_session';

const ASSETS: Record<string, { url: URL; type: string }> = {
  '/ui/': { url: new URL('../ui/index.html', import.meta.url), type: 'text/html; charset=utf-8' },
  '/ui/ui.js': { url: new URL('../ui/ui.js', import.meta.url), type: 'text/javascript; charset=utf-8' },
  '/ui/viewer.css': {
    url: new URL('../../cli/viewer/static/viewer.css', import.meta.url),
    type: 'text/css; charset=utf-8',
  },
};

/** Secrets that expire, oldest dropped first past a bound. */
class ExpiringSecrets {
  private readonly entries = new Map<string, number>();
  private readonly ttlMs: number;
  private readonly max: number;
  constructor(ttlMs: number, max: number) {
    this.ttlMs = ttlMs;
    this.max = max;
  }
  add(): string {
    const now = Date.now();
    for (const [secret, expiresAt] of this.entries) if (expiresAt <= now) this.entries.delete(secret);
    while (this.entries.size >= this.max) this.entries.delete(this.entries.keys().next().value!);
    const secret = randomBytes(32).toString('base64url');
    this.entries.set(secret, now + this.ttlMs);
    return secret;
  }
  /** The known secret equal to `presented` and still valid, if any. */
  find(presented: string): string | undefined {
    const now = Date.now();
    for (const [secret, expiresAt] of this.entries)
      if (expiresAt > now && sameSecret(secret, presented)) return secret;
    return undefined;
  }
  delete(secret: string) {
    this.entries.delete(secret);
  }
}

const SESSION_SECURITY = [{ uiSession: [] }];
const REFUSED = contentAnswer('refused (plain text)', { 'text/plain': z.string() });
/** The page's routes in the OpenAPI document: a person's browser calls them, not a client. */
const pageSchema = (summary: string, answer: object, status = 200) => ({
  summary,
  tags: ['ui'],
  security: SESSION_SECURITY,
  response: { [status]: answer, 401: REFUSED },
});

function refuse(reply: FastifyReply, status: number, message: string) {
  return reply.code(status).headers(PAGE_HEADERS).type('text/plain; charset=utf-8').send(`${message}\n`);
}

export function registerUiRoutes(
  app: FastifyInstance,
  lifecycle: Pick<SandboxLifecycle, 'list'>,
  pools: PoolManager,
): void {
  const links = new ExpiringSecrets(LOGIN_LINK_TTL_MS, MAX_PENDING_LINKS);
  const sessions = new ExpiringSecrets(UI_SESSION_TTL_MS, MAX_SESSIONS);
  const assets = new Map<string, Promise<Buffer>>();

  const requireSession = async (request: FastifyRequest, reply: FastifyReply) => {
    reply.headers(PAGE_HEADERS);
    const session = cookieValue(request.headers.cookie, SESSION_COOKIE);
    if (session === undefined || sessions.find(session) === undefined)
      return refuse(
        reply,
        401,
        'ask for a login link: gym daemon ui (or POST /ui/login-links with the token)',
      );
  };
  const page = (summary: string, answer: object, status = 200) => ({
    config: { auth: 'ui-session' as const },
    onRequest: requireSession,
    schema: pageSchema(summary, answer, status),
  });

  // The one route of /ui that needs the token: it makes the link, and is never a GET a page could trigger.
  app.post(
    '/ui/login-links',
    {
      schema: {
        summary: 'a login link for the /ui page: good once, for a minute (token only)',
        tags: ['ui'],
        response: {
          201: jsonAnswer(
            'the link to open in a browser',
            z.object({ path: z.string(), expiresInMs: z.number().int() }),
          ),
        },
      },
    },
    async (_request, reply) => {
      reply.status(201);
      return { path: `/ui/login?nonce=${links.add()}`, expiresInMs: LOGIN_LINK_TTL_MS };
    },
  );

  app.get<{ Querystring: { nonce?: string } }>(
    '/ui/login',
    {
      config: { auth: 'ui-session' },
      schema: {
        summary: 'open a login link: sets the session cookie and redirects to the page',
        tags: ['ui'],
        security: [],
        querystring: z.object({ nonce: z.string().optional() }),
        response: { 303: emptyAnswer('to /ui/, with the session cookie'), 403: REFUSED },
      },
    },
    async (request, reply) => {
      reply.headers(PAGE_HEADERS);
      const nonce = typeof request.query.nonce === 'string' ? links.find(request.query.nonce) : undefined;
      if (nonce === undefined)
        return refuse(reply, 403, 'this login link is not valid, expired or was used already');
      links.delete(nonce);
      reply.header('set-cookie', sessionCookie(SESSION_COOKIE, sessions.add(), '/ui'));
      return reply.redirect('/ui/', 303);
    },
  );

  app.get('/ui', page('the page', emptyAnswer('to /ui/'), 303), async (_request, reply) =>
    reply.redirect('/ui/', 303),
  );
  for (const [path, asset] of Object.entries(ASSETS))
    app.get(
      path,
      page(`the page's ${path}`, contentAnswer('the asset', { [asset.type]: BYTES })),
      async (_request, reply) => {
        if (!assets.has(path)) assets.set(path, readFile(asset.url));
        return reply.type(asset.type).send(await assets.get(path));
      },
    );

  // What a person needs to see, not the specs: those carry the sandboxes' env, which may hold keys.
  app.get(
    '/ui/api/sandboxes',
    page(
      'what the page shows of the sandboxes',
      jsonAnswer('the sandboxes', z.object({ sandboxes: z.array(z.record(z.string(), z.unknown())) })),
    ),
    async () => ({
      sandboxes: lifecycle.list().map((sandbox) => ({
        id: sandbox.id,
        provider: sandbox.provider,
        state: sandbox.state,
        image: sandbox.image,
        pool: sandbox.pool,
        labels: sandbox.labels,
        createdAt: sandbox.createdAt,
        leaseExpiresAt: sandbox.leaseExpiresAt,
        fromPool: sandbox.fromPool,
      })),
    }),
  );
  app.get(
    '/ui/api/pools',
    page(
      'what the page shows of the pools',
      jsonAnswer('the pools', z.object({ pools: z.array(z.record(z.string(), z.unknown())) })),
    ),
    async () => ({
      pools: pools.list().map(({ definition: _definition, ...stats }) => stats),
    }),
  );
}
