/**
 * The results viewer's HTTP server (`gym eval view`): a page and a read-only JSON API over one
 * results file and the files beside it, on 127.0.0.1 only.
 *
 * Who may read: the results hold agents' and models' text and possibly task data a user keeps
 * private, and any local user or process can connect to a loopback port. So the server makes one
 * random login token, printed once as a URL; its first use exchanges it for a session cookie
 * (HttpOnly, SameSite=Strict, never in a URL again) and the token is spent, so the URL in the
 * browser's history or a terminal scrollback opens nothing. Every other request needs the cookie.
 *
 * What the page may do: only GET and HEAD are answered; the page's own script and style only
 * (a Content-Security-Policy with no inline code, no other origin, no framing); the Host header
 * must be the loopback address it listens on, so a DNS-rebound name cannot read it either.
 */
import { randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import Fastify, { type FastifyInstance, type FastifyReply } from 'fastify';
import { cookieValue, PAGE_HEADERS, sameSecret, sessionCookie } from '../../core/page-security.ts';
import { outputPaths, readJsonl } from '../../environments/runner/files.ts';
import { computeRewardMetrics } from '../../environments/runner/metrics.ts';
import { summarizeFailure, viewRollout } from './results.ts';
import { ResultsIndex } from './results-index.ts';

const STATIC_FILES: Record<string, { file: string; type: string }> = {
  '/': { file: 'index.html', type: 'text/html; charset=utf-8' },
  '/viewer.js': { file: 'viewer.js', type: 'text/javascript; charset=utf-8' },
  '/viewer.css': { file: 'viewer.css', type: 'text/css; charset=utf-8' },
};

export { CONTENT_SECURITY_POLICY } from '../../core/page-security.ts';

const SESSION_COOKIE = 'gym_view_session';

export interface ViewerServerOptions {
  /** The results file (`FILE.jsonl`); its `_failures.jsonl`, `_aggregate_metrics.json` and `_materialized_inputs.jsonl` are read beside it. */
  resultsPath: string;
}

export interface ViewerServer {
  app: FastifyInstance;
  /** The one-time login path (`/login?token=...`); its first use spends it. */
  loginPath: string;
  /** Starts listening on 127.0.0.1 (port 0: any free port); resolves to the origin. */
  listen(port: number): Promise<string>;
}

type Json = Record<string, unknown>;

/** The run's files, the rollouts through an index that reads only what was appended since the last poll. */
function createRunReader(resultsPath: string) {
  const paths = outputPaths(resultsPath);
  const index = new ResultsIndex(resultsPath);
  const readJson = async (path: string): Promise<unknown> => {
    try {
      return JSON.parse(await readFile(path, 'utf8'));
    } catch {
      // Missing (a run in flight writes it at the end) or half-written: no metrics yet.
      return undefined;
    }
  };
  return {
    line: (position: number) => index.line(position),
    async run() {
      const rollouts = await index.summaries();
      const failures = (await readJsonl(paths.failures)).map(summarizeFailure);
      const expected = (await readJsonl(paths.materialized)).length;
      const stored = await readJson(paths.metrics);
      const agent = Array.isArray(stored) && typeof stored[0] === 'object' ? (stored[0] as Json) : undefined;
      const numbers = (value: unknown): Record<string, number> =>
        Object.fromEntries(
          Object.entries(typeof value === 'object' && value !== null ? value : {}).filter(
            ([, entry]) => typeof entry === 'number' && Number.isFinite(entry),
          ),
        );
      // Without a metrics file (a run in flight, NeMo Gym's rollouts alone) the page still shows pass@k, from the lines.
      const byTask = new Map<number, number[]>();
      for (const rollout of rollouts)
        if (rollout.reward !== null)
          byTask.set(rollout.taskIndex, [...(byTask.get(rollout.taskIndex) ?? []), rollout.reward]);
      return {
        file: resultsPath,
        rollouts,
        failures,
        expectedRollouts: expected,
        isComplete: agent !== undefined,
        metrics:
          agent === undefined ? computeRewardMetrics([...byTask.values()]) : numbers(agent.agent_metrics),
        keyMetrics: agent === undefined ? {} : numbers(agent.key_metrics),
        metricsSource: agent === undefined ? 'computed from the rollouts' : paths.metrics,
      };
    },
  };
}

function refuse(reply: FastifyReply, status: number, message: string) {
  return reply.code(status).type('text/plain; charset=utf-8').send(`${message}\n`);
}

export async function buildViewerServer(options: ViewerServerOptions): Promise<ViewerServer> {
  const staticRoot = new URL('./static/', import.meta.url);
  const assets = new Map<string, { body: Buffer; type: string }>();
  for (const [path, { file, type }] of Object.entries(STATIC_FILES))
    assets.set(path, { body: await readFile(new URL(file, staticRoot)), type });
  let loginToken: string | undefined = randomBytes(32).toString('base64url');
  const loginPath = `/login?token=${loginToken}`;
  const sessions = new Set<string>();
  const reader = createRunReader(options.resultsPath);
  let origin: string | undefined;

  // A browser keeps connections open; closing the viewer must not wait for them.
  const app = Fastify({ logger: false, forceCloseConnections: true });
  app.addHook('onRequest', async (request, reply) => {
    reply.headers(PAGE_HEADERS);
    if (origin !== undefined && request.headers.host !== new URL(origin).host)
      return refuse(reply, 421, 'this viewer answers only at its own address');
    if (request.method !== 'GET' && request.method !== 'HEAD')
      return refuse(reply, 405, 'the viewer only reads');
    if (request.url.split('?')[0] === '/login') return;
    const session = cookieValue(request.headers.cookie, SESSION_COOKIE);
    if (session === undefined || ![...sessions].some((known) => sameSecret(known, session)))
      return refuse(reply, 401, 'open the login URL gym eval view printed (it works once)');
  });

  app.get<{ Querystring: { token?: string } }>('/login', async (request, reply) => {
    const token = request.query.token;
    if (loginToken === undefined || typeof token !== 'string' || !sameSecret(token, loginToken))
      return refuse(reply, 403, 'this login URL is not valid or was used already; restart gym eval view');
    loginToken = undefined;
    const session = randomBytes(32).toString('base64url');
    sessions.add(session);
    reply.header('set-cookie', sessionCookie(SESSION_COOKIE, session, '/'));
    return reply.redirect('/', 303);
  });

  for (const [path, asset] of assets)
    app.get(path, async (_request, reply) => reply.type(asset.type).send(asset.body));

  app.get('/api/run', async () => reader.run());
  app.get<{ Params: { position: string } }>('/api/rollouts/:position', async (request, reply) => {
    const position = Number(request.params.position);
    const line = Number.isSafeInteger(position) && position >= 0 ? await reader.line(position) : undefined;
    if (line === undefined) return refuse(reply, 404, 'no such rollout');
    return viewRollout(line, position);
  });

  return {
    app,
    loginPath,
    async listen(port) {
      const address = await app.listen({ host: '127.0.0.1', port });
      origin = address.replace('localhost', '127.0.0.1');
      return origin;
    },
  };
}
