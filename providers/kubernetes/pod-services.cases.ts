/**
 * The cases of a sandbox's companion services on Kubernetes, run on the emulator
 * (`pod-services.int.test.ts`) and on the real cluster (`pod-services.cluster.int.test.ts`):
 * Docker's cases (`providers/docker/service-group.int.test.ts`) where a Pod gives the same thing.
 * The services share the sandbox's loopback and answer to their names, start in dependency order
 * behind their health checks, are reached by no other sandbox, carry the sandbox's hardening and
 * limits, and a service that exits or never becomes healthy fails the create naming it, with the
 * Pod gone.
 */
import { CoreV1Api, type KubeConfig } from '@kubernetes/client-node';
import { afterAll, describe, expect, it } from 'vitest';
import { GymError } from '../../core/errors.ts';
import { ExecRequestSchema } from '../../core/schemas/exec.ts';
import { type SandboxSpecInput, SandboxSpecSchema } from '../../core/schemas/sandbox.ts';
import type { KubernetesProvider } from './kubernetes-provider.ts';

export interface PodServicesSetup {
  name: string;
  image: string;
  kubeConfig: () => KubeConfig;
  namespace: string;
  provider: () => KubernetesProvider;
  skipReason?: string;
}

/** A web server on loopback port 8080 that answers /ping with the word given. */
const webServer = (word: string) => [
  'sh',
  '-c',
  `mkdir -p /tmp/www && echo ${word} > /tmp/www/ping && exec httpd -f -p 8080 -h /tmp/www`,
];
const fetchPing = ExecRequestSchema.parse({ argv: ['wget', '-q', '-O', '-', 'http://127.0.0.1:8080/ping'] });
const fetchByName = ExecRequestSchema.parse({ argv: ['wget', '-q', '-O', '-', 'http://db:8080/ping'] });

export function describePodServices(setup: PodServicesSetup): void {
  const spec = (input: Omit<SandboxSpecInput, 'image'>) =>
    SandboxSpecSchema.parse({ image: setup.image, ...input });
  // Limits only where a case checks them: every container of a Pod requests its own (a group
  // of three at 0.5 cpu asks the scheduler for 1.5), and the test cluster's node has 2 cores.
  const groupSpec = (word: string, resources: SandboxSpecInput['resources'] = {}) =>
    spec({
      resources,
      services: [
        {
          name: 'api',
          image: setup.image,
          // Fails unless db answers already: it started after db was healthy.
          command: ['sh', '-c', 'wget -q -O - http://db:8080/ping > /tmp/seen && exec sleep 86400'],
          dependsOn: [{ service: 'db', condition: 'healthy' }],
        },
        {
          name: 'db',
          image: setup.image,
          command: webServer(word),
          healthcheck: {
            argv: ['wget', '-q', '-O', '/dev/null', 'http://127.0.0.1:8080/ping'],
            intervalMs: 1000,
            retries: 30,
          },
        },
      ],
    });

  describe.skipIf(setup.skipReason !== undefined)(`${setup.name}: a sandbox with companion services`, () => {
    const made: string[] = [];
    const provider = () => setup.provider();
    const core = () => setup.kubeConfig().makeApiClient(CoreV1Api);
    const readPod = (id: string) =>
      core().readNamespacedPod({ name: provider().podName(id), namespace: setup.namespace });
    afterAll(async () => {
      // Also one whose create was still under way when its case timed out (the namespace is this suite's).
      const listed = (await provider().list()).sandboxes.map((sandbox) => sandbox.id);
      await Promise.all(
        [...new Set([...made, ...listed])].map((id) =>
          provider()
            .destroy(id)
            .catch(() => undefined),
        ),
      );
    });

    it('runs them on its loopback under their names, after their dependencies are healthy, and removes them with it', async () => {
      const info = await provider().create(groupSpec('pong'));
      made.push(info.id);
      expect((await provider().exec(info.id, fetchByName)).stdout.trim()).toBe('pong');
      expect((await provider().exec(info.id, fetchPing)).stdout.trim()).toBe('pong');
      const pod = await readPod(info.id);
      // db first (api depends on it), each a sidecar of the one Pod.
      expect(pod.spec?.initContainers?.map((container) => container.name)).toEqual(['svc-db', 'svc-api']);
      expect(pod.spec?.initContainers?.every((container) => container.restartPolicy === 'Always')).toBe(true);
      expect(pod.spec?.hostAliases).toEqual([{ ip: '127.0.0.1', hostnames: ['db', 'api'] }]);
      expect(pod.status?.initContainerStatuses?.map((status) => status.started)).toEqual([true, true]);
      // A listing shows the sandbox once: its services are not sandboxes.
      const listed = (await provider().list()).sandboxes.filter((sandbox) => sandbox.id === info.id);
      expect(listed).toHaveLength(1);
      await provider().destroy(info.id);
      await expect(provider().get(info.id)).rejects.toMatchObject({ code: 'SANDBOX_NOT_FOUND' });
      await expect(readPod(info.id)).rejects.toMatchObject({ code: 404 });
    });

    it("holds each service to the sandbox's hardening and limits", async () => {
      const info = await provider().create(groupSpec('hard', { cpus: 0.25, memoryMiB: 96 }));
      made.push(info.id);
      const pod = await readPod(info.id);
      const sandbox = pod.spec?.containers[0];
      for (const service of pod.spec?.initContainers ?? []) {
        expect(service.resources).toEqual(sandbox?.resources);
        expect(service.securityContext).toEqual(sandbox?.securityContext);
        expect(service.securityContext).toMatchObject({
          allowPrivilegeEscalation: false,
          privileged: false,
          capabilities: { drop: ['ALL'] },
        });
      }
      expect(pod.spec?.automountServiceAccountToken).toBe(false);
    });

    it("keeps each group's services to itself: another sandbox reaches neither their names nor their port", async () => {
      const first = await provider().create(groupSpec('first'));
      made.push(first.id);
      // A second group on the same port does not collide: each Pod has a loopback of its own.
      const second = await provider().create(groupSpec('second'));
      made.push(second.id);
      const lone = await provider().create(spec({}));
      made.push(lone.id);
      expect((await provider().exec(first.id, fetchPing)).stdout.trim()).toBe('first');
      expect((await provider().exec(second.id, fetchPing)).stdout.trim()).toBe('second');
      const fromLone = await provider().exec(lone.id, fetchPing);
      expect(fromLone.exitCode).not.toBe(0);
      expect(fromLone.stdout).toBe('');
      const byNameFromLone = await provider().exec(lone.id, fetchByName);
      expect(byNameFromLone.exitCode).not.toBe(0);
      expect(byNameFromLone.stdout).toBe('');
    });

    it('fails the create naming a service that never becomes healthy, and leaves nothing', async () => {
      const failing = spec({
        labels: { case: 'unhealthy' },
        services: [
          {
            name: 'db',
            image: setup.image,
            command: ['sh', '-c', 'echo db refuses to serve; exec sleep 86400'],
            healthcheck: { argv: ['false'], intervalMs: 1000, retries: 2 },
          },
        ],
      });
      const error = await provider()
        .create(failing)
        .then(
          () => undefined,
          (caught: unknown) => caught,
        );
      expect(error).toBeInstanceOf(GymError);
      expect((error as GymError).code).toBe('SERVICE_UNHEALTHY');
      expect((error as GymError).message).toMatch(/failed to start and was removed: service db is unhealthy/);
      expect((error as GymError).details).toMatchObject({ service: 'db' });
      expect((await provider().list({ labels: { case: 'unhealthy' } })).sandboxes).toEqual([]);
    });

    it('fails the create naming a service that exits before it is healthy', async () => {
      const failing = spec({
        labels: { case: 'exits' },
        services: [
          {
            name: 'worker',
            image: setup.image,
            command: ['sh', '-c', 'echo cannot start >&2; exit 3'],
            healthcheck: { argv: ['true'], intervalMs: 1000 },
          },
        ],
      });
      await expect(provider().create(failing)).rejects.toThrow(/service worker exited with code 3/);
      expect((await provider().list({ labels: { case: 'exits' } })).sandboxes).toEqual([]);
    });
  });
}
