/**
 * A sandbox's companion services on a real engine: they share its loopback and answer to their
 * names, start in dependency order behind their health checks, are reached by nothing outside
 * their group, and are gone after destroy, including when another process (a daemon started
 * again) destroys the sandbox.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { GymError } from '../../core/errors.ts';
import { ExecRequestSchema } from '../../core/schemas/exec.ts';
import { type SandboxSpecInput, SandboxSpecSchema } from '../../core/schemas/sandbox.ts';
import { dockerTestEnvironment, testImage } from '../../test/docker-available.ts';
import { testContext } from '../../test/fixtures/provider-context.ts';
import { DockerProvider } from './docker-provider.ts';
import { EngineTraits } from './engine-kind.ts';
import { SERVICE_OF_LABEL, ServiceGroups } from './service-group.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const busybox = skipReason === undefined ? await testImage(docker, 'busybox') : 'gym/busybox:missing';

/** A web server on loopback port 8080 that answers /ping with the word given. */
const webServer = (word: string) => [
  'sh',
  '-c',
  `mkdir -p /www && echo ${word} > /www/ping && exec httpd -f -p 8080 -h /www`,
];
const fetchPing = ExecRequestSchema.parse({ argv: ['wget', '-q', '-O', '-', 'http://127.0.0.1:8080/ping'] });
const fetchByName = ExecRequestSchema.parse({ argv: ['wget', '-q', '-O', '-', 'http://db:8080/ping'] });

const spec = (input: Omit<SandboxSpecInput, 'image'>) =>
  SandboxSpecSchema.parse({ image: busybox, ...input });

const groupSpec = (word: string) =>
  spec({
    services: [
      {
        name: 'db',
        image: busybox,
        command: webServer(word),
        healthcheck: {
          argv: ['wget', '-q', '-O', '/dev/null', 'http://127.0.0.1:8080/ping'],
          intervalMs: 200,
          retries: 50,
        },
      },
      {
        name: 'api',
        image: busybox,
        // Fails unless db answers already: its dependency waited for db's health.
        command: ['sh', '-c', 'wget -q -O - http://db:8080/ping > /tmp/seen && exec sleep 86400'],
        dependsOn: [{ service: 'db', condition: 'healthy' }],
      },
    ],
  });

const serviceContainers = async (sandboxId: string) =>
  (await docker.listContainers({ all: true, filters: { label: [`${SERVICE_OF_LABEL}=${sandboxId}`] } }))
    .length;

describe.skipIf(skipReason !== undefined)('docker: a sandbox with companion services', () => {
  const provider = new DockerProvider(docker, testContext());
  const made: string[] = [];
  afterAll(async () => {
    await Promise.all(made.map((id) => provider.destroy(id).catch(() => undefined)));
  });

  it('runs them on its loopback under their names, after their dependencies are healthy, and removes them with it', async () => {
    const info = await provider.create(groupSpec('pong'));
    made.push(info.id);
    const byName = await provider.exec(info.id, fetchByName);
    expect(byName.stdout.trim()).toBe('pong');
    expect((await provider.exec(info.id, fetchPing)).stdout.trim()).toBe('pong');
    expect(await serviceContainers(info.id)).toBe(2);
    // A listing shows the sandbox once: its services are not sandboxes.
    const listed = (await provider.list()).sandboxes.filter((sandbox) => sandbox.id === info.id);
    expect(listed).toHaveLength(1);
    await provider.destroy(info.id);
    expect(await serviceContainers(info.id)).toBe(0);
    await expect(provider.get(info.id)).rejects.toMatchObject({ code: 'SANDBOX_NOT_FOUND' });
  });

  it("keeps each group's services to itself: another sandbox reaches neither their names nor their port", async () => {
    const first = await provider.create(groupSpec('first'));
    made.push(first.id);
    // A second group on the same port does not collide: each has a loopback of its own.
    const second = await provider.create(groupSpec('second'));
    made.push(second.id);
    const lone = await provider.create(spec({}));
    made.push(lone.id);
    expect((await provider.exec(first.id, fetchPing)).stdout.trim()).toBe('first');
    expect((await provider.exec(second.id, fetchPing)).stdout.trim()).toBe('second');
    const fromLone = await provider.exec(lone.id, fetchPing);
    expect(fromLone.exitCode).not.toBe(0);
    expect(fromLone.stdout).toBe('');
    const byNameFromLone = await provider.exec(lone.id, fetchByName);
    expect(byNameFromLone.exitCode).not.toBe(0);
    expect(byNameFromLone.stdout).toBe('');
  });

  it('removes the services of a sandbox it did not create (a daemon started again destroys it)', async () => {
    const info = await provider.create(groupSpec('pong'));
    made.push(info.id);
    const restarted = new DockerProvider(docker, testContext());
    await restarted.destroy(info.id);
    expect(await serviceContainers(info.id)).toBe(0);
    await expect(provider.get(info.id)).rejects.toMatchObject({ code: 'SANDBOX_NOT_FOUND' });
  });

  it('fails the create naming a service that never becomes healthy, and leaves nothing', async () => {
    const failing = spec({
      labels: { case: 'unhealthy' },
      services: [
        {
          name: 'db',
          image: busybox,
          command: ['sh', '-c', 'echo db refuses to serve; exec sleep 86400'],
          healthcheck: { argv: ['false'], intervalMs: 100, retries: 2 },
        },
      ],
    });
    const error = await provider.create(failing).then(
      () => undefined,
      (caught: unknown) => caught,
    );
    expect(error).toBeInstanceOf(GymError);
    expect((error as GymError).code).toBe('SERVICE_UNHEALTHY');
    expect((error as GymError).message).toMatch(/service db is unhealthy.*db refuses to serve/s);
    // (By its label: other test files create sandboxes in the same namespace meanwhile.)
    expect((await provider.list({ labels: { case: 'unhealthy' } })).sandboxes).toEqual([]);
    const leftovers = await docker.listContainers({ all: true, filters: { label: ['gym.service=db'] } });
    expect(leftovers.filter((container) => container.Labels['gym.user.case'] === 'unhealthy')).toHaveLength(
      0,
    );
  });

  it('fails the create naming a service that exits before it is healthy', async () => {
    const failing = spec({
      services: [
        {
          name: 'worker',
          image: busybox,
          command: ['sh', '-c', 'echo cannot start >&2; exit 3'],
          healthcheck: { argv: ['true'], intervalMs: 1000 },
        },
      ],
    });
    await expect(provider.create(failing)).rejects.toThrow(
      /service worker exited with code 3.*cannot start/s,
    );
  });

  it('gives up on a service still starting past its bound, whatever its health check allows', async () => {
    // A dataset's intervals and retries could hold a create (and its admission slot) for days.
    const name = (id: string) => `gym-test-bound-${id}`;
    const groups = new ServiceGroups(docker, undefined, new EngineTraits(docker), name, 1500);
    const id = `sbx-bound${Date.now().toString(36)}`;
    const sandbox = await docker.createContainer({
      name: name(id),
      Image: busybox,
      Cmd: ['sleep', '600'],
      HostConfig: { NetworkMode: 'none' },
    });
    await sandbox.start();
    const slow = spec({
      services: [
        {
          name: 'db',
          image: busybox,
          command: ['sleep', '600'],
          healthcheck: { argv: ['true'], intervalMs: 600_000, startPeriodMs: 600_000, retries: 1000 },
        },
      ],
    });
    try {
      await expect(groups.start(id, slow, sandbox.id, { [SERVICE_OF_LABEL]: id })).rejects.toThrow(
        /service db did not become healthy within 2 s/,
      );
    } finally {
      await groups.removeGroup(id, sandbox);
    }
    expect(await serviceContainers(id)).toBe(0);
  });
});
