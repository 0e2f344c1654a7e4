/**
 * Managed snapshots and fork against the memory provider: the store across restarts, the reaper,
 * the limits, the reserved labels, lineage, what a child does not inherit, and the clean-up of a
 * fork that fails half way. The archive toolkit is replaced by a stand-in that copies the memory
 * provider's files (its real bodies are tested on real providers in providers/contract/).
 */
import { mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { Clock } from '../../core/clock.ts';
import { GymError } from '../../core/errors.ts';
import type { SandboxInfo, SandboxSpec } from '../../core/schemas/sandbox.ts';
import type {
  CreateOptions,
  ProviderContext,
  SandboxProvider,
  SnapshotOptions,
} from '../../providers/sandbox-provider.ts';
import type {
  ArchiveCaptureOptions,
  ArchiveSnapshotManifest,
} from '../../providers/shared/archive-snapshot.ts';
import { startTestDaemon, type TestDaemon } from '../../test/daemon-harness.ts';
import { MemoryProvider } from '../../test/fixtures/memory-provider.ts';

/** The archive stand-in: the sandbox's memory files, as JSON in the daemon's file. */
const archive = vi.hoisted(() => ({ replays: [] as string[], captureError: undefined as unknown }));
vi.mock('../../providers/shared/archive-snapshot.ts', async () => {
  const { readFile, rm: remove, writeFile: write } = await import('node:fs/promises');
  const filesOf = (provider: SandboxProvider) => (provider as unknown as MemoryProvider).files;
  return {
    captureArchiveSnapshot: async (provider: SandboxProvider, id: string, options: ArchiveCaptureOptions) => {
      if (archive.captureError !== undefined) throw archive.captureError;
      const files = [...filesOf(provider)]
        .filter(([key]) => key.startsWith(`${id}:`))
        .map(([key, value]) => [key.slice(id.length + 1), value.toString('base64')]);
      const text = JSON.stringify(files);
      await write(options.file, text, { mode: 0o600 });
      return { file: options.file, sizeBytes: text.length, details: {} } satisfies ArchiveSnapshotManifest;
    },
    replayArchiveSnapshot: async (
      provider: SandboxProvider,
      id: string,
      manifest: ArchiveSnapshotManifest,
    ) => {
      archive.replays.push(id);
      const files = JSON.parse(await readFile(manifest.file, 'utf8')) as Array<[string, string]>;
      for (const [path, content] of files)
        filesOf(provider).set(`${id}:${path}`, Buffer.from(content, 'base64'));
    },
    removeArchiveSnapshot: async (manifest: ArchiveSnapshotManifest) => {
      await remove(manifest.file, { force: true });
    },
  };
});

/** The memory provider with a native snapshot: an image is a copy of the sandbox's files. */
class SnapshottingProvider extends MemoryProvider {
  readonly images = new Map<string, Map<string, Buffer>>();
  readonly deleted: string[] = [];
  snapshotSizeBytes: number | undefined = 10;
  /** Creates of this many more succeed; then they fail (undefined: all succeed). */
  createsLeft: number | undefined;

  override async create(spec: SandboxSpec, options: CreateOptions = {}): Promise<SandboxInfo> {
    if (this.createsLeft !== undefined) {
      if (this.createsLeft <= 0) throw new GymError('SANDBOX_START_FAILED', 'the backend refused');
      this.createsLeft -= 1;
    }
    const info = await super.create(spec, options);
    for (const [path, content] of this.images.get(spec.image) ?? [])
      this.files.set(`${info.id}:${path}`, content);
    return info;
  }

  async snapshot(id: string, options: SnapshotOptions) {
    await this.get(id);
    const files = new Map<string, Buffer>();
    for (const [key, value] of this.files)
      if (key.startsWith(`${id}:`)) files.set(key.slice(id.length + 1), Buffer.from(value));
    this.images.set(options.image, files);
    return {
      image: options.image,
      ...(this.snapshotSizeBytes === undefined ? {} : { sizeBytes: this.snapshotSizeBytes }),
    };
  }

  async deleteSnapshot(image: string) {
    this.deleted.push(image);
    this.images.delete(image);
  }

  async inspectImage(reference: string) {
    return this.images.has(reference) ? ({ reference } as never) : null;
  }
}

class MovableClock implements Clock {
  offsetMs = 0;
  now() {
    return Date.now() + this.offsetMs;
  }
  monotonicMs() {
    return performance.now() + this.offsetMs;
  }
}

let daemon: TestDaemon | undefined;
const directories: string[] = [];
const providers: Record<string, MemoryProvider> = {};

afterEach(async () => {
  await daemon?.cleanup();
  daemon = undefined;
  archive.replays.length = 0;
  archive.captureError = undefined;
  for (const directory of directories.splice(0)) await rm(directory, { recursive: true, force: true });
});

async function start(
  options: {
    native?: boolean;
    config?: Record<string, unknown>;
    stateDir?: string;
    clock?: Clock;
    providerNames?: string[];
  } = {},
): Promise<TestDaemon> {
  const names = options.providerNames ?? ['memory'];
  const make = (name: string) => (_options: unknown, context: ProviderContext) => {
    const provider =
      options.native === false
        ? new MemoryProvider(context)
        : new SnapshottingProvider(context, { capabilities: { snapshot: true } });
    providers[name] = provider;
    return provider;
  };
  daemon = await startTestDaemon(
    {
      providers: names.map((name) => ({ name })),
      ...(options.stateDir === undefined ? {} : { stateDir: options.stateDir }),
      ...options.config,
    },
    {
      factories: Object.fromEntries(names.map((name) => [name, make(name)])),
      ...(options.clock === undefined ? {} : { clock: options.clock }),
    },
  );
  return daemon;
}

async function call(
  test: TestDaemon,
  method: 'GET' | 'POST' | 'DELETE' | 'PUT',
  url: string,
  payload?: unknown,
) {
  const response = await test.app.inject({
    method,
    url,
    headers: test.auth,
    ...(payload === undefined ? {} : { payload: payload as Record<string, unknown> }),
  });
  return { status: response.statusCode, body: response.body === '' ? undefined : response.json() };
}

async function createSandbox(
  test: TestDaemon,
  body: Record<string, unknown> = { image: 'img' },
): Promise<string> {
  const created = await call(test, 'POST', '/v1/sandboxes', body);
  expect(created.status, JSON.stringify(created.body)).toBe(201);
  return created.body.id as string;
}

async function put(test: TestDaemon, id: string, path: string, content: string) {
  const response = await test.app.inject({
    method: 'PUT',
    url: `/v1/sandboxes/${id}/files?path=${encodeURIComponent(path)}`,
    headers: { ...test.auth, 'content-type': 'application/octet-stream' },
    payload: Buffer.from(content),
  });
  expect(response.statusCode, response.body).toBe(204);
}

function fileOf(name: string, id: string, path: string): string | undefined {
  return providers[name]!.files.get(`${id}:${path}`)?.toString();
}

async function snapshot(test: TestDaemon, id: string, body: Record<string, unknown> = {}) {
  const made = await call(test, 'POST', `/v1/sandboxes/${id}/snapshot`, body);
  expect(made.status, JSON.stringify(made.body)).toBe(200);
  return made.body.snapshot as { id: string; image: string; method: string; expiresAt: string };
}

describe('managed snapshots', () => {
  it('snapshots natively, lists, starts a sandbox from snapshot:<id>, and refuses unknown ids and other providers', async () => {
    const test = await start({ providerNames: ['memory', 'other'] });
    const parent = await createSandbox(test);
    await put(test, parent, '/work/state.txt', 'prepared');
    const made = await snapshot(test, parent, { labels: { task: 't1' } });
    expect(made).toMatchObject({ image: `snapshot:${made.id}`, method: 'native', provider: 'memory' });
    expect(
      (await call(test, 'GET', '/v1/snapshots')).body.snapshots.map((s: { id: string }) => s.id),
    ).toEqual([made.id]);
    expect((await call(test, 'GET', `/v1/snapshots/${made.id}`)).body).toMatchObject({
      id: made.id,
      sandboxId: parent,
      baseImage: 'img',
      labels: { task: 't1' },
    });

    const child = await createSandbox(test, { image: made.image });
    expect(fileOf('memory', child, '/work/state.txt')).toBe('prepared');
    expect((await call(test, 'GET', `/v1/sandboxes/${child}`)).body).toMatchObject({
      image: made.image,
      lineage: null,
    });

    const unknown = await call(test, 'POST', '/v1/sandboxes', { image: 'snapshot:snp_0000000000000000' });
    expect(unknown.status).toBe(404);
    expect(unknown.body.error.code).toBe('SNAPSHOT_NOT_FOUND');
    const elsewhere = await call(test, 'POST', '/v1/sandboxes', { image: made.image, provider: 'other' });
    expect(elsewhere.status).toBe(400);
    expect(elsewhere.body.error).toMatchObject({ code: 'VALIDATION_FAILED' });
    expect(elsewhere.body.error.message).toContain('provider memory');
    expect((await call(test, 'GET', '/v1/snapshots/snp_0000000000000000')).body.error.code).toBe(
      'SNAPSHOT_NOT_FOUND',
    );
  });

  it('falls back to an archive in the state directory (0600) and replays it before the sandbox is returned', async () => {
    const test = await start({ native: false });
    const parent = await createSandbox(test);
    await put(test, parent, '/work/a', 'from the parent');
    const made = await snapshot(test, parent);
    expect(made.method).toBe('archive');
    const file = join(test.stateDir, 'snapshots', `${made.id}.tar`);
    expect((await stat(file)).mode & 0o777).toBe(0o600);
    expect((await stat(join(test.stateDir, 'snapshots'))).mode & 0o777).toBe(0o700);
    const child = await createSandbox(test, { image: made.image });
    expect(archive.replays).toEqual([child]);
    expect(fileOf('memory', child, '/work/a')).toBe('from the parent');
    // The provider created the base image; the API shows what the caller named.
    expect(providers.memory!.sandboxes.get(child)?.image).toBe('img');
    // As a client that sends content-type: application/json on every request deletes it: no body.
    const deleted = await test.app.inject({
      method: 'DELETE',
      url: `/v1/snapshots/${made.id}`,
      headers: { ...test.auth, 'content-type': 'application/json' },
    });
    expect(deleted.statusCode, deleted.body).toBe(204);
    expect((await call(test, 'GET', `/v1/snapshots/${made.id}`)).status).toBe(404);
    await expect(stat(file)).rejects.toThrow();
    expect((await call(test, 'DELETE', `/v1/snapshots/${made.id}`)).status).toBe(204);
  });

  it('keeps every snapshot across a restart, reaps the expired ones, and drops those whose content is gone', async () => {
    const stateDir = await mkdtemp(join(tmpdir(), 'gym-snapshots-'));
    directories.push(stateDir);
    const clock = new MovableClock();
    let test = await start({ native: false, stateDir, clock });
    const parent = await createSandbox(test, { image: 'img', ttlSeconds: 7200 });
    const short = await snapshot(test, parent, { ttlSeconds: 60 });
    const long = await snapshot(test, parent, { ttlSeconds: 3600 });
    const lost = await snapshot(test, parent, { ttlSeconds: 3600 });
    await test.stop();
    daemon = undefined;
    await rm(join(stateDir, 'snapshots', `${lost.id}.tar`));
    await writeFile(join(stateDir, 'snapshots', 'snp_stray00000000000.tar'), 'left by a crash');

    test = await start({ native: false, stateDir, clock });
    const ids = () => test.manager.snapshots.list().map((s) => s.id);
    expect(ids().sort()).toEqual([short.id, long.id].sort());
    await expect(stat(join(stateDir, 'snapshots', 'snp_stray00000000000.tar'))).rejects.toThrow();
    clock.offsetMs = 120_000;
    await test.manager.snapshots.reap();
    expect(ids()).toEqual([long.id]);
    await expect(stat(join(stateDir, 'snapshots', `${short.id}.tar`))).rejects.toThrow();
  });

  it("renews the parent's lease: a snapshot is a use", async () => {
    const clock = new MovableClock();
    const test = await start({ clock });
    const parent = await createSandbox(test, { image: 'img', ttlSeconds: 60 });
    const before = Date.parse((await call(test, 'GET', `/v1/sandboxes/${parent}`)).body.leaseExpiresAt);
    clock.offsetMs = 30_000;
    await snapshot(test, parent);
    const after = Date.parse((await call(test, 'GET', `/v1/sandboxes/${parent}`)).body.leaseExpiresAt);
    expect(after - before).toBeGreaterThanOrEqual(29_000);
  });

  it('drops a native snapshot whose image the provider no longer has', async () => {
    const test = await start();
    const made = await snapshot(test, await createSandbox(test));
    (providers.memory as SnapshottingProvider).images.clear();
    await test.manager.snapshots.reconcile();
    expect((await call(test, 'GET', `/v1/snapshots/${made.id}`)).body.error.code).toBe('SNAPSHOT_NOT_FOUND');
  });

  it('refuses a snapshot past maxCount without evicting any, and one past maxBytes keeping nothing', async () => {
    const test = await start({ config: { snapshots: { maxCount: 2, maxBytes: 100 } } });
    const parent = await createSandbox(test);
    const first = await snapshot(test, parent);
    await snapshot(test, parent);
    const third = await call(test, 'POST', `/v1/sandboxes/${parent}/snapshot`, {});
    expect(third.status).toBe(429);
    expect(third.body.error.code).toBe('CAPACITY_EXCEEDED');
    expect(third.body.error.message).toContain('snapshots.maxCount');
    expect(test.manager.snapshots.list()).toHaveLength(2);
    const forked = await call(test, 'POST', `/v1/sandboxes/${parent}/fork`, { count: 1 });
    expect(forked.body.error.code).toBe('CAPACITY_EXCEEDED');
    await call(test, 'DELETE', `/v1/snapshots/${first.id}`);

    const provider = providers.memory as SnapshottingProvider;
    provider.snapshotSizeBytes = 101;
    const large = await call(test, 'POST', `/v1/sandboxes/${parent}/snapshot`, {});
    expect(large.status).toBe(413);
    expect(large.body.error.code).toBe('SNAPSHOT_TOO_LARGE');
    expect(test.manager.snapshots.list()).toHaveLength(1);
    expect(provider.images.size).toBe(1);
  });

  it('refuses to remove a snapshot a pool starts from, and replays it before a pool member goes idle', async () => {
    const test = await start({ native: false });
    const parent = await createSandbox(test);
    await put(test, parent, '/work/setup', 'done');
    const made = await snapshot(test, parent);
    const defined = await call(test, 'PUT', '/v1/pools/warm', {
      spec: { image: made.image },
      minIdle: 1,
      maxTotal: 2,
    });
    expect(defined.status, JSON.stringify(defined.body)).toBeLessThan(300);
    await vi.waitFor(() => expect(test.pools.stats('warm').idle).toBe(1));
    const [member] = test.manager.lifecycle.poolRecords('warm');
    expect(archive.replays).toContain(member!.id);
    expect(fileOf('memory', member!.id, '/work/setup')).toBe('done');

    const refused = await call(test, 'DELETE', `/v1/snapshots/${made.id}`);
    expect(refused.status).toBe(400);
    expect(refused.body.error.message).toContain('pool warm');
    expect(test.manager.snapshots.list()).toHaveLength(1);

    const undefinedSnapshot = await call(test, 'PUT', '/v1/pools/cold', {
      spec: { image: 'snapshot:snp_0000000000000000' },
    });
    expect(undefinedSnapshot.body.error.code).toBe('SNAPSHOT_NOT_FOUND');
    expect((await call(test, 'DELETE', '/v1/pools/warm')).status).toBeLessThan(300);
    expect((await call(test, 'DELETE', `/v1/snapshots/${made.id}`)).status).toBe(204);
  });
});

describe('reserved gym. labels', () => {
  it('are refused at create, snapshot, fork, pool definition and pool acquire', async () => {
    const test = await start();
    const reserved = { 'gym.fork.parent': 'sbx-forged' };
    const parent = await createSandbox(test);
    const attempts = [
      await call(test, 'POST', '/v1/sandboxes', { image: 'img', labels: reserved }),
      await call(test, 'POST', `/v1/sandboxes/${parent}/snapshot`, { labels: reserved }),
      await call(test, 'POST', `/v1/sandboxes/${parent}/fork`, { count: 1, labels: reserved }),
      await call(test, 'PUT', '/v1/pools/p', { spec: { image: 'img', labels: reserved } }),
    ];
    expect(
      (await call(test, 'PUT', '/v1/pools/q', { spec: { image: 'img' }, minIdle: 0 })).status,
    ).toBeLessThan(300);
    attempts.push(await call(test, 'POST', '/v1/sandboxes', { pool: 'q', labels: reserved }));
    for (const attempt of attempts) {
      expect(attempt.status).toBe(400);
      expect(attempt.body.error.code).toBe('VALIDATION_FAILED');
      expect(attempt.body.error.message).toContain('gym.');
    }
    expect(test.manager.snapshots.list()).toEqual([]);
    expect(test.manager.lifecycle.list().map((sandbox) => sandbox.id)).toEqual([parent]);
  });
});

describe('fork', () => {
  it('makes count children with lineage, the gym.fork labels and their own leases, and none of the parent exec env', async () => {
    const test = await start();
    expect(
      (await call(test, 'PUT', '/v1/pools/p', { spec: { image: 'img', env: { SPEC: 'kept' } }, minIdle: 1 }))
        .status,
    ).toBeLessThan(300);
    await vi.waitFor(() => expect(test.pools.stats('p').idle).toBe(1));
    const claimed = await call(test, 'POST', '/v1/sandboxes', {
      pool: 'p',
      labels: { task: 'x' },
      env: { GYM_ROLLOUT_KEY: 'secret-of-the-parent' },
    });
    const parent = claimed.body.id as string;
    await put(test, parent, '/work/f', 'at fork time');
    const forked = await call(test, 'POST', `/v1/sandboxes/${parent}/fork`, {
      count: 3,
      labels: { branch: 'b' },
      env: { EXTRA: '1' },
      ttlSeconds: 120,
    });
    expect(forked.status, JSON.stringify(forked.body)).toBe(201);
    const { snapshot: made, sandboxes } = forked.body as {
      snapshot: { id: string };
      sandboxes: Array<{
        id: string;
        lineage: unknown;
        labels: Record<string, string>;
        pool: null;
        leaseExpiresAt: string;
      }>;
    };
    expect(sandboxes).toHaveLength(3);
    expect(new Set(sandboxes.map((child) => child.id)).size).toBe(3);
    sandboxes.forEach((child, forkIndex) => {
      expect(child.lineage).toEqual({ parent, snapshot: made.id, forkIndex });
      expect(child.labels).toEqual({
        task: 'x',
        branch: 'b',
        'gym.fork.parent': parent,
        'gym.fork.snapshot': made.id,
        'gym.fork.index': String(forkIndex),
      });
      expect(child.pool).toBeNull();
      expect(fileOf('memory', child.id, '/work/f')).toBe('at fork time');
    });
    const fetched = (await call(test, 'GET', `/v1/sandboxes/${sandboxes[1]!.id}`)).body;
    expect(fetched.lineage).toEqual({ parent, snapshot: made.id, forkIndex: 1 });
    expect(fetched.spec).toMatchObject({
      image: `snapshot:${made.id}`,
      ttlSeconds: 120,
      env: { SPEC: 'kept', EXTRA: '1' },
    });
    // Listed by lineage label.
    const listed = await call(test, 'GET', `/v1/sandboxes?label=gym.fork.parent=${parent}`);
    expect(listed.body.sandboxes).toHaveLength(3);

    // The adversary's view: a child's commands get none of the parent's per-claim env.
    for (const child of sandboxes) {
      const record = test.manager.lifecycle.record(child.id);
      expect(record.execEnv).toEqual({});
      expect(record.gatewayUrl).toBeNull();
      expect(record.egress).toBeNull();
      await call(test, 'POST', `/v1/sandboxes/${child.id}/exec`, { argv: ['env'] });
      expect(JSON.stringify(providers.memory!.execs.at(-1))).not.toContain('secret-of-the-parent');
    }
    await call(test, 'POST', `/v1/sandboxes/${parent}/exec`, { argv: ['env'] });
    expect(JSON.stringify(providers.memory!.execs.at(-1))).toContain('secret-of-the-parent');

    // Each child has its own lease: renewing one moves only its own.
    const leases = () =>
      Promise.all(
        sandboxes.map(
          async (child) => (await call(test, 'GET', `/v1/sandboxes/${child.id}`)).body.leaseExpiresAt,
        ),
      );
    const before = await leases();
    await call(test, 'POST', `/v1/sandboxes/${sandboxes[0]!.id}/keepalive`, { ttlSeconds: 3600 });
    const after = await leases();
    expect(after[0]).not.toBe(before[0]);
    expect(after.slice(1)).toEqual(before.slice(1));
  });

  it('does not carry the env of a cold pool acquire either (it is exec env, not spec)', async () => {
    const test = await start();
    expect(
      (await call(test, 'PUT', '/v1/pools/cold', { spec: { image: 'img' }, minIdle: 0 })).status,
    ).toBeLessThan(300);
    const claimed = await call(test, 'POST', '/v1/sandboxes', {
      pool: 'cold',
      env: { KEY: 'secret-of-the-parent' },
    });
    expect(claimed.body.fromPool).toBe(false);
    expect(JSON.stringify(claimed.body.spec)).not.toContain('secret-of-the-parent');
    await call(test, 'POST', `/v1/sandboxes/${claimed.body.id}/exec`, { argv: ['env'] });
    expect(JSON.stringify(providers.memory!.execs.at(-1))).toContain('secret-of-the-parent');
    const forked = await call(test, 'POST', `/v1/sandboxes/${claimed.body.id}/fork`, { count: 1 });
    const child = forked.body.sandboxes[0].id as string;
    await call(test, 'POST', `/v1/sandboxes/${child}/exec`, { argv: ['env'] });
    expect(JSON.stringify(providers.memory!.execs.at(-1))).not.toContain('secret-of-the-parent');
    expect(JSON.stringify(providers.memory!.sandboxes.get(child))).not.toContain('secret-of-the-parent');
  });

  it('leaves no half fork: a child that fails destroys the others and the snapshot', async () => {
    const test = await start();
    const parent = await createSandbox(test);
    const provider = providers.memory as SnapshottingProvider;
    provider.createsLeft = 2;
    const forked = await call(test, 'POST', `/v1/sandboxes/${parent}/fork`, { count: 3 });
    expect(forked.status).toBe(502);
    expect(forked.body.error.code).toBe('SANDBOX_START_FAILED');
    expect(test.manager.lifecycle.list().map((sandbox) => sandbox.id)).toEqual([parent]);
    expect([...provider.sandboxes.keys()]).toEqual([parent]);
    expect(test.manager.snapshots.list()).toEqual([]);
    expect(provider.images.size).toBe(0);
  });

  it('counts children against the per-provider cap like any create', async () => {
    const test = await start({
      config: { providers: [{ name: 'memory', maxLiveSandboxes: 3, queueSize: 0 }] },
    });
    const parent = await createSandbox(test);
    const forked = await call(test, 'POST', `/v1/sandboxes/${parent}/fork`, { count: 3 });
    expect(forked.status).toBe(429);
    expect(forked.body.error.code).toBe('CAPACITY_EXCEEDED');
    expect(test.manager.lifecycle.list()).toHaveLength(1);
    expect(test.manager.snapshots.list()).toEqual([]);
  });

  it('refuses live: true where the provider declares no liveFork, before any snapshot', async () => {
    const test = await start();
    const parent = await createSandbox(test);
    const forked = await call(test, 'POST', `/v1/sandboxes/${parent}/fork`, { count: 2, live: true });
    expect(forked.status).toBe(501);
    expect(forked.body.error).toMatchObject({
      code: 'CAPABILITY_UNSUPPORTED',
      details: { capability: 'liveFork' },
    });
    expect(test.manager.snapshots.list()).toEqual([]);
  });

  it('forks a child again natively, but refuses to archive a sandbox made from an archive', async () => {
    const test = await start();
    const parent = await createSandbox(test);
    await put(test, parent, '/a', '1');
    const first = (await call(test, 'POST', `/v1/sandboxes/${parent}/fork`, { count: 1 })).body.sandboxes[0]
      .id;
    await put(test, first, '/b', '2');
    const second = await call(test, 'POST', `/v1/sandboxes/${first}/fork`, { count: 1 });
    expect(second.status).toBe(201);
    const grandchild = second.body.sandboxes[0];
    expect(fileOf('memory', grandchild.id, '/a')).toBe('1');
    expect(fileOf('memory', grandchild.id, '/b')).toBe('2');
    expect(grandchild.lineage.parent).toBe(first);
    expect(grandchild.labels['gym.fork.parent']).toBe(first);
    expect(second.body.snapshot.baseImage).toBe('img');
  });

  it('refuses a second archive of an archived child', async () => {
    const test = await start({ native: false });
    const parent = await createSandbox(test);
    const child = (await call(test, 'POST', `/v1/sandboxes/${parent}/fork`, { count: 1 })).body.sandboxes[0]
      .id;
    const again = await call(test, 'POST', `/v1/sandboxes/${child}/fork`, { count: 1 });
    expect(again.status).toBe(501);
    expect(again.body.error.code).toBe('CAPABILITY_UNSUPPORTED');
  });
});
