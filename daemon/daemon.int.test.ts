import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { InjectOptions } from 'fastify';
import { afterAll, describe, expect, it } from 'vitest';
import { GymClient } from '../client/client.ts';
import { isGymError } from '../core/errors.ts';
import { entriesToTar, tarToEntries } from '../providers/contract/tar-helpers.ts';
import { spawnDaemonProcess, startTestDaemon } from '../test/daemon-harness.ts';
import { dockerTestEnvironment, testImage } from '../test/docker-available.ts';
import { waitFor } from '../test/wait-for.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const busybox = skipReason === undefined ? await testImage(docker, 'busybox') : 'gym/busybox:missing';

function uniqueNamespace(prefix: string): string {
  return `${prefix}-${randomBytes(4).toString('hex')}`;
}

async function labelledContainers(namespace: string): Promise<string[]> {
  const containers = await docker.listContainers({
    all: true,
    filters: { label: [`gym.namespace=${namespace}`] },
  });
  return containers.map((container) => container.Labels['gym.sandbox-id'] ?? '');
}

describe.skipIf(skipReason !== undefined)('daemon against real Docker', () => {
  const cleanups: Array<() => Promise<void>> = [];
  afterAll(async () => {
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => {});
  });

  it('serves every sandbox route end to end', async () => {
    const namespace = uniqueNamespace('api');
    const daemon = await startTestDaemon({ namespace });
    cleanups.push(() => daemon.cleanup());
    const inject = (options: InjectOptions) =>
      daemon.app.inject({ ...options, headers: { ...daemon.auth, ...options.headers } });

    const created = await inject({
      method: 'POST',
      url: '/v1/sandboxes',
      payload: { image: busybox, labels: { suite: 'api' }, env: { GREETING: 'hello' } },
    });
    expect(created.statusCode, created.body).toBe(201);
    const { id } = created.json();
    expect(await labelledContainers(namespace)).toEqual([id]);

    const oneShot = await inject({
      method: 'POST',
      url: `/v1/sandboxes/${id}/exec`,
      payload: { command: 'echo $GREETING; exit 4' },
    });
    expect(oneShot.json()).toMatchObject({ status: 'ok', exitCode: 4, stdout: 'hello\n' });
    const session = await inject({
      method: 'POST',
      url: `/v1/sandboxes/${id}/exec`,
      payload: { argv: ['cat'], stdin: 'via session', session: 'main' },
    });
    expect(session.json()).toMatchObject({ status: 'ok', stdout: 'via session' });
    const timeout = await inject({
      method: 'POST',
      url: `/v1/sandboxes/${id}/exec`,
      payload: { command: 'sleep 30', timeoutMs: 300 },
    });
    expect(timeout.json().status).toBe('timeout');

    const streamed = await inject({
      method: 'POST',
      url: `/v1/sandboxes/${id}/exec?stream=ndjson`,
      payload: { command: 'echo one; echo two >&2' },
    });
    const events = streamed.body
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line));
    expect(
      events
        .filter((event) => event.type === 'stdout')
        .map((event) => event.data)
        .join(''),
    ).toBe('one\n');
    expect(events.at(-1)).toMatchObject({ type: 'result', result: { exitCode: 0, stderr: 'two\n' } });

    const bytes = randomBytes(100_000);
    const put = await inject({
      method: 'PUT',
      url: `/v1/sandboxes/${id}/files?path=/data/blob.bin&mode=600`,
      headers: { 'content-type': 'application/octet-stream' },
      payload: bytes,
    });
    expect(put.statusCode, put.body).toBe(204);
    const get = await inject({ method: 'GET', url: `/v1/sandboxes/${id}/files?path=/data/blob.bin` });
    expect(get.rawPayload.equals(bytes)).toBe(true);
    const mode = await inject({
      method: 'POST',
      url: `/v1/sandboxes/${id}/exec`,
      payload: { argv: ['stat', '-c', '%a', '/data/blob.bin'] },
    });
    expect(mode.json().stdout).toBe('600\n');

    const tar = await new Response(
      entriesToTar([
        { name: 'a/b.txt', type: 'file', content: Buffer.from('in a tree') },
      ]) as unknown as ReadableStream,
    ).arrayBuffer();
    const putArchive = await inject({
      method: 'PUT',
      url: `/v1/sandboxes/${id}/archive?path=/work`,
      headers: { 'content-type': 'application/x-tar' },
      payload: Buffer.from(tar),
    });
    expect(putArchive.statusCode, putArchive.body).toBe(204);
    const getArchive = await inject({ method: 'GET', url: `/v1/sandboxes/${id}/archive?path=/work` });
    const { Readable } = await import('node:stream');
    const entries = await tarToEntries(Readable.from([getArchive.rawPayload]));
    expect(entries.find((entry) => entry.name === 'a/b.txt')?.content?.toString()).toBe('in a tree');
    const unsafe = await inject({
      method: 'PUT',
      url: `/v1/sandboxes/${id}/archive?path=/work`,
      headers: { 'content-type': 'application/x-tar' },
      payload: Buffer.from(
        await new Response(
          entriesToTar([
            { name: '../escape.txt', type: 'file', content: Buffer.from('x') },
          ]) as unknown as ReadableStream,
        ).arrayBuffer(),
      ),
    });
    expect(unsafe.statusCode).toBe(400);
    expect(unsafe.json().error.code).toBe('ARCHIVE_UNSAFE');

    const image = `gym-snapshot/test-daemon:${id}`;
    const snapshot = await inject({
      method: 'POST',
      url: `/v1/sandboxes/${id}/snapshot`,
      payload: { image },
    });
    expect(snapshot.json()).toEqual({ image });
    await docker.getImage(image).remove({ force: true });

    const missingImage = await inject({
      method: 'POST',
      url: '/v1/sandboxes',
      payload: { image: 'gym/no-such-image:1' },
    });
    expect(missingImage.statusCode).toBe(404);
    expect(missingImage.json().error.code).toBe('IMAGE_NOT_FOUND');

    expect((await inject({ method: 'DELETE', url: `/v1/sandboxes/${id}` })).statusCode).toBe(204);
    expect(await labelledContainers(namespace)).toEqual([]);
  });

  it('survives kill -9: adopts live sandboxes on restart, reaps expired ones, leaks nothing', async () => {
    const namespace = uniqueNamespace('crash');
    const stateDir = await mkdtemp(join(tmpdir(), 'gym-crash-'));
    const configPath = join(stateDir, 'gym.yaml');
    await writeFile(
      configPath,
      `stateDir: ${stateDir}\nnamespace: ${namespace}\nlisten: { host: 127.0.0.1, port: 0 }\nreaperIntervalMs: 300\norphanScanIntervalMs: 1000\nlogLevel: warn\n`,
    );
    let child: ChildProcess | undefined;
    cleanups.push(async () => {
      child?.kill('SIGKILL');
      await Promise.all(
        (await labelledContainers(namespace)).map((id) =>
          docker.getContainer(`gym-${namespace}-${id}`).remove({ force: true }),
        ),
      );
      await rm(stateDir, { recursive: true, force: true });
    });

    const start = async (): Promise<GymClient> => {
      const started = await spawnDaemonProcess(configPath, stateDir);
      child = started.child;
      return started.client;
    };

    let client = await start();
    const longLived = await Promise.all(
      Array.from({ length: 5 }, () =>
        client.createSandbox({ image: busybox, ttlSeconds: 600, labels: { life: 'long' } }),
      ),
    );
    const shortLived = await Promise.all(
      Array.from({ length: 5 }, () =>
        client.createSandbox({ image: busybox, ttlSeconds: 25, labels: { life: 'short' } }),
      ),
    );
    const allIds = [...longLived, ...shortLived].map((sandbox) => sandbox.id).sort();
    expect((await labelledContainers(namespace)).sort()).toEqual(allIds);

    child!.kill('SIGKILL');
    await new Promise((resolve) => child!.once('exit', resolve));
    expect((await labelledContainers(namespace)).sort()).toEqual(allIds);

    client = await start();
    expect((await client.listSandboxes()).map((sandbox) => sandbox.id).sort()).toEqual(allIds);
    const results = await Promise.all(allIds.map((id) => client.exec(id, { argv: ['echo', id] })));
    expect(results.map((result) => result.stdout.trim()).sort()).toEqual(allIds);

    // The short leases (25 s from creation, renewed by the exec above) run out; the reaper takes them.
    // (25 s: on a loaded machine the creates, the kill and the restart took more than 12 s.)
    const survivors = await waitFor(
      'the short-lived sandboxes to be reaped',
      async () => {
        const left = await labelledContainers(namespace);
        return left.length === 5 ? left.sort() : undefined;
      },
      60_000,
    );
    expect(survivors).toEqual(longLived.map((sandbox) => sandbox.id).sort());
    const gone = await client.exec(shortLived[0]!.id, { argv: ['true'] }).catch((error: unknown) => error);
    expect(isGymError(gone, 'SANDBOX_NOT_FOUND')).toBe(true);

    await Promise.all(survivors.map((id) => client.destroySandbox(id)));
    expect(await labelledContainers(namespace)).toEqual([]);
    child!.kill('SIGTERM');
    await new Promise((resolve) => child!.once('exit', resolve));
  }, 150_000);

  it('absorbs a burst of 200 creates against a limit of 20: every request gets a sandbox or a 429, none is lost', async () => {
    const namespace = uniqueNamespace('burst');
    const daemon = await startTestDaemon(
      {
        namespace,
        providers: [
          {
            name: 'docker',
            maxLiveSandboxes: 20,
            maxConcurrentCreates: 8,
            queueSize: 40,
            queueTimeoutMs: 30_000,
          },
        ],
      },
      { listen: true },
    );
    cleanups.push(() => daemon.cleanup());
    const client = new GymClient({ url: daemon.address.url!, token: daemon.token });
    const outcomes = await Promise.all(
      Array.from({ length: 200 }, async () => {
        try {
          const sandbox = await client.createSandbox({ image: busybox, labels: { burst: 'yes' } });
          const result = await client.exec(sandbox.id, { argv: ['true'], session: 's' });
          await client.destroySandbox(sandbox.id);
          return result.status === 'ok' ? 'served' : `exec ${result.status}`;
        } catch (error) {
          return isGymError(error, 'CAPACITY_EXCEEDED') ? 'refused' : `error ${String(error)}`;
        }
      }),
    );
    const counts: Record<string, number> = {};
    for (const outcome of outcomes) counts[outcome] = (counts[outcome] ?? 0) + 1;
    console.info(`burst of 200: ${JSON.stringify(counts)}`);
    expect(Object.keys(counts).sort()).toEqual(
      Object.keys(counts)
        .filter((key) => key === 'served' || key === 'refused')
        .sort(),
    );
    expect(counts.served).toBeGreaterThanOrEqual(20);
    expect((counts.served ?? 0) + (counts.refused ?? 0)).toBe(200);
    expect(await client.listSandboxes()).toEqual([]);
    expect(await labelledContainers(namespace)).toEqual([]);
    const health = await client.health();
    expect(health.ok).toBe(true);
  });
});
