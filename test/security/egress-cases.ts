/**
 * The egress contract, once for every provider (issue 24, item 3): a daemon whose only provider
 * is the row's, one sandbox with an allow-list policy, and from inside it the agent's probes
 * (test/security/egress-shell-client.ts, busybox applets only, so every provider's smallest image
 * runs them). What each row proves: an allowed host answers through the proxy (a tool reading
 * `http_proxy`, and a CONNECT by hand); a host not listed, a raw IP, a private and a loopback
 * address and the daemon's API port are refused by the proxy; DNS and direct sockets (to the
 * test's hosts, to the daemon's API, to every address of the host) reach nothing; a `PUT
 * /network` switch applies to new connections and cuts the open one; the log lists every
 * attempt; a daemon restart keeps the policy and the variables (the provider restores the relay
 * at the same URL); `none` takes the variables away and the kept credential opens nothing; a
 * fork child's copy of the parent's credential opens nothing through the child's relay.
 *
 * "The internet" is servers on 127.0.0.x and names only the test's resolver knows: no test sends
 * traffic anywhere else. One sandbox per row, few execs (each probe batch is one), since an exec
 * over SSH costs seconds.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { networkInterfaces, tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GymClient } from '../../client/client.ts';
import type { DaemonConfigInput } from '../../daemon/config.ts';
import { startTestDaemon, type TestDaemon } from '../daemon-harness.ts';
import { egressProbes, probeResults } from './egress-shell-client.ts';

/** What a row's backend gives the cases: the provider's configuration and an image with busybox. */
export interface EgressBackend {
  image: string;
  /** The daemon's providers (the first is its default); Docker's default when absent. */
  providers?: DaemonConfigInput['providers'];
  /** Checks the provider's own isolation of a sandbox that has a policy (Kubernetes: the deny-all NetworkPolicy). */
  checkIsolation?: (namespace: string) => Promise<void>;
  tearDown(): Promise<void>;
}

export interface EgressRow {
  /** Shown in the suite's title. */
  name: string;
  skipReason?: string;
  /** Per case and for the set-up; an SSH row needs minutes under load. */
  timeoutMs: number;
  setUp(): Promise<EgressBackend>;
}

function httpHost(address: string, answer: string, seen: IncomingHttpHeaders[]) {
  const server = createServer((request, response) => {
    seen.push(request.headers);
    response.end(answer);
  });
  return new Promise<{ server: Server; port: number }>((resolve) =>
    server.listen(0, address, () => resolve({ server, port: (server.address() as { port: number }).port })),
  );
}

const VARIABLES = ['HTTP_PROXY', 'HTTPS_PROXY', 'http_proxy', 'https_proxy'] as const;

export function defineEgressCases(row: EgressRow): void {
  describe.skipIf(row.skipReason !== undefined)(
    `egress contract: ${row.name}`,
    { timeout: row.timeoutMs },
    () => {
      const seen: IncomingHttpHeaders[] = [];
      let backend: EgressBackend | undefined;
      let daemon: TestDaemon | undefined;
      let client: GymClient;
      let sandboxId = '';
      let proxyUrl = '';
      let stateDir = '';
      let apiPort = 0;
      const namespace = `egress-${randomBytes(3).toString('hex')}`;
      const hosts: Record<string, { server: Server; port: number }> = {};
      const names: Record<string, string[]> = {
        'allowed.test': ['127.0.0.2'],
        'other.test': ['127.0.0.3'],
        // A listening host on a loopback address the operator did not open.
        'loop.test': ['127.0.0.4'],
        'lan.test': ['10.1.2.3'],
        'api.test': ['127.0.0.1'],
      };

      const api = async (method: string, path: string, body?: unknown) => {
        const response = await fetch(`${daemon!.address.url}${path}`, {
          method,
          headers: { ...daemon!.auth, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
          ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        });
        return { status: response.status, body: (await response.json()) as Record<string, unknown> };
      };
      const probe = async (probes: string[], session?: string, id = sandboxId) => {
        const result = await client.exec(id, {
          argv: egressProbes(probes),
          timeoutMs: 120_000,
          ...(session === undefined ? {} : { session }),
        });
        expect(result.status, result.stderr).toBe('ok');
        if (session !== undefined) expect(result.session, 'the provider ran it in a session').toBeUndefined();
        return probeResults(result.stdout);
      };
      const log = async (id = sandboxId) =>
        (await api('GET', `/v1/sandboxes/${id}/network/log`)).body as {
          attempts: Array<{
            host: string;
            port: number;
            verdict: string;
            reason?: string;
            bytesDown: number;
          }>;
          dropped: number;
        };

      /** The row's daemon on the suite's state directory: a second call stands for a restart. */
      const startDaemon = async () => {
        daemon = await startTestDaemon(
          {
            namespace,
            stateDir,
            ...(backend!.providers === undefined ? {} : { providers: backend!.providers }),
            gateway: {
              upstream: { baseUrl: 'http://127.0.0.9:9/v1', apiKey: 'sk-upstream-secret', model: 'm' },
            },
            egress: {
              allowedHosts: ['*.test:*'],
              // The test's hosts (and the API's address, refused for being the API all the same);
              // 127.0.0.4 is loopback the operator did not open.
              allowPrivateAddresses: ['127.0.0.1/32', '127.0.0.2/31'],
              idleTimeoutSeconds: 120,
            },
          },
          {
            listen: true,
            egressResolver: async (host) => {
              const addresses = names[host];
              if (addresses === undefined) throw Object.assign(new Error('unknown'), { code: 'ENOTFOUND' });
              return addresses;
            },
          },
        );
        apiPort = Number(new URL(daemon.address.url!).port);
        client = new GymClient({ url: daemon.address.url!, token: daemon.token });
      };

      beforeAll(async () => {
        hosts.allowed = await httpHost('127.0.0.2', 'hello from allowed.test', seen);
        hosts.other = await httpHost('127.0.0.3', 'hello from other.test', seen);
        hosts.loop = await httpHost('127.0.0.4', 'hello from loop.test', seen);
        // Stands for everything else on the host, on every address it has.
        hosts.host = await httpHost('0.0.0.0', 'hello from the host', seen);
        backend = await row.setUp();
        stateDir = await mkdtemp(join(tmpdir(), 'gym-egress-'));
        await startDaemon();
        const sandbox = await client.createSandbox({
          image: backend.image,
          ttlSeconds: 900,
          network: {
            mode: 'allowlist',
            allowedHosts: ['allowed.test:*', 'loop.test:*', 'lan.test:*', 'api.test:*'],
          },
        } as never);
        sandboxId = sandbox.id;
      }, row.timeoutMs);

      afterAll(async () => {
        await daemon?.stop({ destroy: true }).catch(() => {});
        if (stateDir !== '') await rm(stateDir, { recursive: true, force: true });
        await backend?.tearDown();
        for (const host of Object.values(hosts)) host.server.close();
      }, row.timeoutMs);

      it('gives its commands the proxy variables (one-shot and in a session), and no network of its own (spec: none)', async () => {
        const { env } = await probe(['envs env']);
        const values = Object.fromEntries(env!.split(' ').map((pair) => pair.split(/=(.*)/s, 2)));
        proxyUrl = values.HTTP_PROXY!;
        expect(proxyUrl).toMatch(/^http:\/\/sbx[^:]*:[0-9a-f]{64}@127\.0\.0\.1:\d+$/);
        for (const name of VARIABLES) expect(values[name], name).toBe(proxyUrl);
        expect(values.NO_PROXY).toBe('localhost,127.0.0.1');
        expect(values.no_proxy).toBe('localhost,127.0.0.1');
        // A command in a session (as the harnesses run theirs) gets the same.
        expect((await probe(['envs env'], 'agent')).env).toBe(env);
        expect((await client.getSandbox(sandboxId)).spec.network).toBe('none');
        const view = (await api('GET', `/v1/sandboxes/${sandboxId}/network`)).body;
        expect(view.proxy).toMatch(/^http:\/\/sbx[^:]*:\*\*\*@127\.0\.0\.1:\d+$/);
        await backend!.checkIsolation?.(namespace);
      });

      it('reaches the allowed host through the proxy, and nothing else from inside', async () => {
        const { allowed, other, loop, host } = hosts as Record<string, { port: number }>;
        const hostAddresses = Object.values(networkInterfaces())
          .flatMap((list) => list ?? [])
          .filter((entry) => entry.family === 'IPv4')
          .map((entry) => entry.address);
        const results = await probe([
          `fetch fetch-allowed http://allowed.test:${allowed!.port}/`,
          `connect connect-allowed allowed.test:${allowed!.port}`,
          `connect refused-host other.test:${other!.port}`,
          `fetch fetch-refused http://other.test:${other!.port}/`,
          `connect raw-ip 127.0.0.2:${allowed!.port}`,
          'connect private lan.test:80',
          `connect loopback loop.test:${loop!.port}`,
          `connect api api.test:${apiPort}`,
          'dns dns allowed.test',
          `direct direct-allowed 127.0.0.2 ${allowed!.port}`,
          `direct direct-api 127.0.0.1 ${apiPort}`,
          ...hostAddresses.map((address, index) => `direct direct-host-${index} ${address} ${host!.port}`),
        ]);
        expect(results['fetch-allowed']).toBe('0 hello from allowed.test');
        expect(results['connect-allowed']).toBe('200 hello from allowed.test');
        expect(results['refused-host']).toMatch(/^403 /);
        expect(results['fetch-refused']).toMatch(/^1 .*403/);
        expect(results['raw-ip']).toMatch(/^403 /);
        expect(results.private).toMatch(/^403 /);
        expect(results.loopback).toMatch(/^403 /);
        expect(results.api).toMatch(/^403 /);
        expect(results.dns).toBe('failed');
        expect(results['direct-allowed']).toBe('failed');
        expect(results['direct-api']).toBe('failed');
        for (const [index, address] of hostAddresses.entries())
          expect(results[`direct-host-${index}`], `a socket straight to ${address}`).toBe('failed');
        const seenText = JSON.stringify(seen);
        expect(seenText).not.toContain('sk-upstream-secret');
        expect(seenText).not.toContain(daemon!.token);
        expect(seenText.toLowerCase()).not.toContain('proxy-authorization');
      });

      it('a policy switch applies to new connections and cuts the open one', async () => {
        const { allowed, other } = hosts as Record<string, { port: number }>;
        const holding = probe([`hold hold allowed.test:${allowed!.port} 90`]);
        expect((await probe(['held held'])).held).toBe('open');
        const switched = await api('PUT', `/v1/sandboxes/${sandboxId}/network`, {
          mode: 'allowlist',
          allowedHosts: ['other.test:*'],
        });
        expect(switched.status, JSON.stringify(switched.body)).toBe(200);
        // Ended by the proxy (exit 0), not by the 90 s timeout.
        expect((await holding).hold).toBe('0');
        expect((await log()).attempts.at(-1)?.reason).toBe('the sandbox network policy changed');
        const after = await probe([
          `connect old allowed.test:${allowed!.port}`,
          `connect new other.test:${other!.port}`,
        ]);
        expect(after.old).toMatch(/^403 /);
        expect(after.new).toBe('200 hello from other.test');
      });

      it('lists every attempt, allowed or refused, in the log', async () => {
        const { attempts, dropped } = await log();
        expect(dropped).toBe(0);
        expect(attempts.map((attempt) => `${attempt.host}:${attempt.verdict}`).sort()).toEqual(
          [
            'allowed.test:allowed', // wget
            'allowed.test:allowed', // CONNECT
            'other.test:refused',
            'other.test:refused',
            '127.0.0.2:refused',
            'lan.test:refused',
            'loop.test:refused',
            'api.test:refused',
            'allowed.test:allowed', // the tunnel the switch cut
            'allowed.test:refused', // after the switch
            'other.test:allowed',
          ].sort(),
        );
        const reasonOf = (host: string) => attempts.find((attempt) => attempt.host === host)?.reason;
        expect(reasonOf('lan.test')).toMatch(/private/);
        expect(reasonOf('loop.test')).toMatch(/loopback/);
        expect(reasonOf('api.test')).toContain("daemon's own API");
        expect(attempts.find((attempt) => attempt.verdict === 'allowed')!.bytesDown).toBeGreaterThan(0);
      });

      it('holds across a daemon restart: the policy, the variables and the relay come back', async () => {
        await daemon!.stop();
        await startDaemon();
        const { other, allowed } = hosts as Record<string, { port: number }>;
        const results = await probe([
          'envs env',
          `connect old allowed.test:${allowed!.port}`,
          `connect new other.test:${other!.port}`,
        ]);
        expect(results.env).toContain(`HTTP_PROXY=${proxyUrl} `);
        expect(results.old).toMatch(/^403 /);
        expect(results.new).toBe('200 hello from other.test');
        // The log is the daemon's memory: the restarted one has these two only.
        expect((await log()).attempts.map((attempt) => `${attempt.host}:${attempt.verdict}`)).toEqual([
          'allowed.test:refused',
          'other.test:allowed',
        ]);
      });

      it('`none` takes the variables away, and the credential kept from before opens nothing', async () => {
        expect((await api('PUT', `/v1/sandboxes/${sandboxId}/network`, { mode: 'none' })).status).toBe(200);
        const { other } = hosts as Record<string, { port: number }>;
        const results = await probe(['envs env', `connect kept other.test:${other!.port} ${proxyUrl}`]);
        const unset =
          'HTTP_PROXY=unset HTTPS_PROXY=unset http_proxy=unset https_proxy=unset NO_PROXY=unset no_proxy=unset';
        expect(results.env).toBe(unset);
        // The session opened under the agent's policy keeps none of it either.
        expect((await probe(['envs env'], 'agent')).env).toBe(unset);
        expect(results.kept).toMatch(/^403 /);
      });

      it("a fork child's copy of the parent's credential opens nothing, and is logged as the child's", async () => {
        const { allowed, other } = hosts as Record<string, { port: number }>;
        const network = `/v1/sandboxes/${sandboxId}/network`;
        expect(
          (await api('PUT', network, { mode: 'allowlist', allowedHosts: ['allowed.test:*'] })).status,
        ).toBe(200);
        const parentLog = (await log()).attempts.length;
        const forked = await api('POST', `/v1/sandboxes/${sandboxId}/fork`, { count: 1 });
        expect(forked.status, JSON.stringify(forked.body)).toBe(201);
        const child = (forked.body.sandboxes as Array<{ id: string }>)[0]!.id;
        const given = await api('PUT', `/v1/sandboxes/${child}/network`, {
          mode: 'allowlist',
          allowedHosts: ['other.test:*'],
        });
        expect(given.status, JSON.stringify(given.body)).toBe(200);
        // The parent's credential (the agent kept it in a file the fork copied), sent through the
        // child's own relay, whose port the child's own variables name.
        const childPort = new URL((given.body as { proxy: string }).proxy.replace('***', 'x')).port;
        const stolen = new URL(proxyUrl);
        stolen.port = childPort;
        const results = await probe(
          [
            `connect stolen allowed.test:${allowed!.port} ${stolen.toString().replace(/\/$/, '')}`,
            `connect own other.test:${other!.port}`,
          ],
          undefined,
          child,
        );
        expect(results.stolen).toMatch(/^407 /);
        expect(results.own).toBe('200 hello from other.test');
        expect(
          (await log(child)).attempts.map(
            (attempt) => `${attempt.host}:${attempt.verdict}:${attempt.reason ?? ''}`,
          ),
        ).toEqual(["allowed.test:refused:another sandbox's credential", 'other.test:allowed:']);
        expect((await log()).attempts.length).toBe(parentLog);
      });
    },
  );
}
