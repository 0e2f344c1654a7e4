import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeViewerResults } from '../../test/fixtures/viewer-results.ts';
import { buildViewerServer, CONTENT_SECURITY_POLICY, type ViewerServer } from './server.ts';

describe('the viewer server', () => {
  let folder: string;
  let viewer: ViewerServer;
  let origin: string;

  beforeAll(async () => {
    folder = await mkdtemp(join(tmpdir(), 'gym-viewer-server-'));
    const { resultsPath } = await writeViewerResults(folder);
    viewer = await buildViewerServer({ resultsPath });
    origin = await viewer.listen(0);
  });
  afterAll(async () => {
    await viewer.app.close();
    await rm(folder, { recursive: true, force: true });
  });

  /** A server of its own, and a session on it. */
  const freshSession = async () => {
    const server = await buildViewerServer({ resultsPath: join(folder, 'results.jsonl') });
    const serverOrigin = await server.listen(0);
    const response = await fetch(`${serverOrigin}${server.loginPath}`, { redirect: 'manual' });
    return {
      server,
      origin: serverOrigin,
      cookie: (response.headers.get('set-cookie') ?? '').split(';')[0]!,
    };
  };

  const login = async () => {
    const response = await fetch(`${origin}${viewer.loginPath}`, { redirect: 'manual' });
    return { response, cookie: (response.headers.get('set-cookie') ?? '').split(';')[0]! };
  };

  it('listens on 127.0.0.1 only', () => {
    expect(new URL(origin).hostname).toBe('127.0.0.1');
  });

  it('serves nothing, page or data, without a session, and a wrong token or a forged cookie gets none', async () => {
    for (const path of ['/', '/viewer.js', '/api/run', '/api/rollouts/0']) {
      const response = await fetch(`${origin}${path}`);
      expect(response.status).toBe(401);
      expect(await response.text()).not.toContain('money-1');
      expect(response.headers.get('content-security-policy')).toBe(CONTENT_SECURITY_POLICY);
    }
    expect((await fetch(`${origin}/login?token=guess`, { redirect: 'manual' })).status).toBe(403);
    expect((await fetch(`${origin}/login`, { redirect: 'manual' })).status).toBe(403);
    const forged = await fetch(`${origin}/api/run`, { headers: { cookie: 'gym_view_session=forged' } });
    expect(forged.status).toBe(401);
  });

  it('exchanges the login link once for an HttpOnly SameSite=Strict cookie, and the link is spent', async () => {
    const { response, cookie } = await login();
    expect(response.status).toBe(303);
    expect(response.headers.get('location')).toBe('/');
    expect(response.headers.get('set-cookie')).toMatch(/; HttpOnly; SameSite=Strict; Path=\//);
    const run = await fetch(`${origin}/api/run`, { headers: { cookie } });
    expect(run.status).toBe(200);
    const body = (await run.json()) as { rollouts: Array<{ task: string }> };
    expect(body.rollouts.map((rollout) => rollout.task)).toContain('money-1');
    const page = await fetch(`${origin}/`, { headers: { cookie } });
    expect(page.headers.get('content-security-policy')).toBe(CONTENT_SECURITY_POLICY);
    expect(page.headers.get('x-frame-options')).toBe('DENY');
    expect(await page.text()).not.toMatch(/<script>|\sstyle=|\son\w+=/);
    const again = await fetch(`${origin}${viewer.loginPath}`, { redirect: 'manual' });
    expect(again.status).toBe(403);
    expect(again.headers.get('set-cookie')).toBeNull();
  });

  it('only reads: any other method is refused, with a session too', async () => {
    const session = await freshSession();
    try {
      expect((await fetch(`${session.origin}/api/run`, { headers: { cookie: session.cookie } })).status).toBe(
        200,
      );
      for (const method of ['POST', 'PUT', 'DELETE', 'PATCH'])
        for (const path of ['/api/run', '/api/rollouts/0', '/', '/login'])
          expect(
            (await fetch(`${session.origin}${path}`, { method, headers: { cookie: session.cookie } })).status,
          ).toBe(405);
    } finally {
      await session.server.app.close();
    }
  });

  it('answers only at its own address, so a DNS-rebound name cannot read it', async () => {
    const { request } = await import('node:http');
    const status = await new Promise<number>((resolve, reject) => {
      const outgoing = request(`${origin}/`, { headers: { host: 'attacker.example' } }, (response) => {
        response.resume();
        resolve(response.statusCode ?? 0);
      });
      outgoing.on('error', reject);
      outgoing.end();
    });
    expect(status).toBe(421);
  });

  it('serves one rollout by its position, and nothing for a position past the file', async () => {
    const { server: other, origin: otherOrigin, cookie } = await freshSession();
    try {
      const rollout = await fetch(`${otherOrigin}/api/rollouts/2`, { headers: { cookie } });
      expect(((await rollout.json()) as { summary: { task: string } }).summary.task).toBe('parser-2');
      for (const position of ['99', '-1', '1.5', 'x'])
        expect((await fetch(`${otherOrigin}/api/rollouts/${position}`, { headers: { cookie } })).status).toBe(
          404,
        );
    } finally {
      await other.app.close();
    }
  });
});
