/**
 * Issue 9, item 8: a spec without `resources` ran with no memory, CPU or pids limit, and so did
 * the SWE verifier's sandbox. Now the daemon's configured defaults reach the container itself.
 *
 * A row per tier: under gVisor the engine's limits hold the sandbox's kernel too, so the
 * container gets the spec's memory and pids plus that kernel's declared overhead
 * (`providers/docker/runtime-tier.ts`), and the spec still says what the guest asked for.
 */
import { randomBytes } from 'node:crypto';
import type { InjectOptions } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GVISOR_MEMORY_OVERHEAD_MIB, GVISOR_PIDS_OVERHEAD } from '../../providers/docker/runtime-tier.ts';
import { startTestDaemon, type TestDaemon } from '../daemon-harness.ts';
import { dockerTestEnvironment, testImage } from '../docker-available.ts';
import { type DockerTier, dockerTier } from '../docker-tiers.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const busybox = skipReason === undefined ? await testImage(docker, 'busybox') : 'gym/busybox:missing';
const MiB = 1024 * 1024;
const tiers: DockerTier[] =
  skipReason === undefined ? [await dockerTier('runc'), await dockerTier('runsc')] : [];

for (const tier of tiers) {
  describe.skipIf(tier.skipReason !== undefined)(
    `resource limits by default, on Docker (${tier.name})`,
    () => {
      const namespace = `limits-${randomBytes(3).toString('hex')}`;
      let daemon: TestDaemon;
      // What the engine is given beyond the spec: gVisor's kernel's own pids and memory.
      const memoryOverhead = tier.name === 'runsc' ? GVISOR_MEMORY_OVERHEAD_MIB : 0;
      const pidsOverhead = tier.name === 'runsc' ? GVISOR_PIDS_OVERHEAD : 0;

      beforeAll(async () => {
        daemon = await startTestDaemon({
          namespace,
          maxResources: { memoryMiB: 8192 },
          providers: [{ name: 'docker', options: tier.providerOptions }],
        });
      });

      afterAll(async () => {
        const { sandboxes } = (await inject({ method: 'GET', url: '/v1/sandboxes' })).json() as {
          sandboxes: Array<{ id: string }>;
        };
        for (const { id } of sandboxes) await inject({ method: 'DELETE', url: `/v1/sandboxes/${id}` });
        await daemon.cleanup();
      });

      const inject = (options: InjectOptions) =>
        daemon.app.inject({ ...options, headers: { ...daemon.auth, ...options.headers } });

      async function hostConfigOf(id: string) {
        const inspected = await docker.getContainer(`gym-${namespace}-${id}`).inspect();
        const { Memory, NanoCpus, PidsLimit } = inspected.HostConfig;
        return { Memory, NanoCpus, PidsLimit };
      }

      it('runs a spec without resources under the configured cpu, memory and pids limits', async () => {
        const created = await inject({ method: 'POST', url: '/v1/sandboxes', payload: { image: busybox } });
        expect(created.statusCode, created.body).toBe(201);
        const { id, spec } = created.json() as { id: string; spec: { resources: Record<string, number> } };
        expect(spec.resources).toMatchObject({ cpus: 2, memoryMiB: 4096, pidsLimit: 1024 });
        expect(await hostConfigOf(id)).toEqual({
          Memory: (4096 + memoryOverhead) * MiB,
          NanoCpus: 2e9,
          PidsLimit: 1024 + pidsOverhead,
        });
      });

      it('allows an explicit larger value within maxResources', async () => {
        const created = await inject({
          method: 'POST',
          url: '/v1/sandboxes',
          payload: { image: busybox, resources: { memoryMiB: 8192 } },
        });
        expect(created.statusCode, created.body).toBe(201);
        expect(await hostConfigOf(created.json().id)).toEqual({
          Memory: (8192 + memoryOverhead) * MiB,
          NanoCpus: 2e9,
          PidsLimit: 1024 + pidsOverhead,
        });
      });

      it('refuses cpus that Docker would round to "no limit"', async () => {
        const refused = await inject({
          method: 'POST',
          url: '/v1/sandboxes',
          payload: { image: busybox, resources: { cpus: 1e-10 } },
        });
        expect(refused.statusCode).toBe(400);
        expect(refused.json().error.message).toContain('resources.cpus');
      });
    },
  );
}
