import { afterEach, describe, expect, it, vi } from 'vitest';
import { CONTENT_SECURITY_POLICY } from '../../core/page-security.ts';
import type { ProviderContext } from '../../providers/sandbox-provider.ts';
import { startTestDaemon, type TestDaemon } from '../../test/daemon-harness.ts';
import { MemoryProvider } from '../../test/fixtures/memory-provider.ts';
import { LOGIN_LINK_TTL_MS } from './ui.ts';

let daemon: TestDaemon | undefined;

async function start(): Promise<TestDaemon> {
  daemon = await startTestDaemon(
    { providers: [{ name: 'memory' }] },
    {
      factories: { memory: (_options: unknown, context: ProviderContext) => new MemoryProvider(context, {}) },
    },
  );
  return daemon;
}

afterEach(async () => {
  vi.restoreAllMocks();
  await daemon?.cleanup();
  daemon = undefined;
});

async function loginLink(test: TestDaemon): Promise<string> {
  const response = await test.app.inject({ method: 'POST', url: '/ui/login-links', headers: test.auth });
  expect(response.statusCode).toBe(201);
  return (response.json() as { path: string }).path;
}

async function session(test: TestDaemon): Promise<string> {
  const response = await test.app.inject({ method: 'GET', url: await loginLink(test) });
  expect(response.statusCode).toBe(303);
  return String(response.headers['set-cookie']).split(';')[0]!;
}

describe('/ui behind the daemon token', () => {
  it('serves nothing without a session, and only a token holder gets a login link', async () => {
    const test = await start();
    for (const url of ['/ui', '/ui/', '/ui/ui.js', '/ui/api/sandboxes', '/ui/api/pools']) {
      const response = await test.app.inject({ method: 'GET', url });
      expect(response.statusCode).toBe(401);
      expect(response.headers['content-security-policy']).toBe(CONTENT_SECURITY_POLICY);
    }
    expect((await test.app.inject({ method: 'POST', url: '/ui/login-links' })).statusCode).toBe(401);
    expect((await test.app.inject({ method: 'GET', url: '/ui/login?nonce=guess' })).statusCode).toBe(403);
    const forged = await test.app.inject({
      method: 'GET',
      url: '/ui/',
      headers: { cookie: 'gym_ui_session=forged' },
    });
    expect(forged.statusCode).toBe(401);
  });

  it('turns a login link, once, into an HttpOnly SameSite=Strict cookie for /ui; the token is in no URL', async () => {
    const test = await start();
    const token = test.auth.authorization.slice('Bearer '.length);
    const link = await loginLink(test);
    expect(link).not.toContain(token);
    const login = await test.app.inject({ method: 'GET', url: link });
    expect(login.statusCode).toBe(303);
    expect(login.headers.location).toBe('/ui/');
    expect(String(login.headers['set-cookie'])).toMatch(
      /^gym_ui_session=[\w-]+; HttpOnly; SameSite=Strict; Path=\/ui$/,
    );
    expect(String(login.headers['set-cookie'])).not.toContain(token);
    expect((await test.app.inject({ method: 'GET', url: link })).statusCode).toBe(403);
    const cookie = String(login.headers['set-cookie']).split(';')[0]!;
    const page = await test.app.inject({ method: 'GET', url: '/ui/', headers: { cookie } });
    expect(page.statusCode).toBe(200);
    expect(page.headers['content-security-policy']).toBe(CONTENT_SECURITY_POLICY);
    expect(page.body).toContain('<table id="sandboxes">');
    expect(page.body).not.toMatch(/<script>|\sstyle=|\son\w+=/);
  });

  it('refuses a link past its lifetime', async () => {
    const test = await start();
    const link = await loginLink(test);
    const now = Date.now();
    vi.spyOn(Date, 'now').mockReturnValue(now + LOGIN_LINK_TTL_MS + 1);
    expect((await test.app.inject({ method: 'GET', url: link })).statusCode).toBe(403);
  });

  it('lists sandboxes and pools without their specs, and the cookie authorizes nothing of the API', async () => {
    const test = await start();
    const created = await test.app.inject({
      method: 'POST',
      url: '/v1/sandboxes',
      headers: test.auth,
      payload: { image: 'img', env: { SECRET_KEY: 'do-not-show' }, labels: { run: 'eval-1' } },
    });
    expect(created.statusCode, created.body).toBe(201);
    const id = (created.json() as { id: string }).id;
    const cookie = await session(test);
    const listed = await test.app.inject({ method: 'GET', url: '/ui/api/sandboxes', headers: { cookie } });
    expect(listed.json()).toMatchObject({ sandboxes: [{ id, image: 'img', labels: { run: 'eval-1' } }] });
    expect(listed.body).not.toContain('do-not-show');
    expect(
      (await test.app.inject({ method: 'GET', url: '/ui/api/pools', headers: { cookie } })).json(),
    ).toEqual({
      pools: [],
    });
    for (const [method, url] of [
      ['GET', '/v1/sandboxes'],
      ['GET', `/v1/sandboxes/${id}`],
      ['DELETE', `/v1/sandboxes/${id}`],
      ['POST', '/v1/sandboxes'],
      ['POST', '/ui/login-links'],
    ] as const) {
      const response = await test.app.inject({
        method,
        url,
        headers: { cookie },
        payload: method === 'POST' ? { image: 'img' } : undefined,
      });
      expect(response.statusCode, `${method} ${url}`).toBe(401);
    }
    const still = await test.app.inject({ method: 'GET', url: `/v1/sandboxes/${id}`, headers: test.auth });
    expect(still.statusCode).toBe(200);
  });
});
