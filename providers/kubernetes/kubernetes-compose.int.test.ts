/**
 * Multi-container tasks end to end on a daemon whose only provider is Kubernetes, through the
 * emulator: a Terminal-Bench task with a docker-compose.yaml (a client and a server `db` the tests
 * ask by name) and a Harbor task whose MCP server is a Compose service and whose
 * [environment.healthcheck] gates the agent. Each service runs as a sidecar of the sandbox's Pod
 * behind its health check; the oracle scores 1, a do-nothing agent 0, and no Pod is left. The task's images are built by a Docker daemon first
 * (the Kubernetes provider builds none; the emulator runs Pods from the engine's images).
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GymClient } from '../../client/client.ts';
import { silentLogger } from '../../core/logger.ts';
import { loadEnvironment, readRows } from '../../environments/environment.ts';
import { runEval } from '../../environments/runner/eval.ts';
import { readJsonl } from '../../environments/runner/files.ts';
import { gymFields } from '../../environments/runner/rollout-line.ts';
import { HarnessRegistry } from '../../harnesses/registry.ts';
import { startTestDaemon, type TestDaemon } from '../../test/daemon-harness.ts';
import { dockerTestEnvironment, testImage } from '../../test/docker-available.ts';
import { harborTask, terminalBenchTask } from '../../test/fixtures/compose-tasks.ts';
import { KubernetesEmulator } from '../../test/k8s-emulator/emulator.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const NAMESPACE = 'gym-compose-test';

describe.skipIf(skipReason !== undefined)(
  'a multi-container task on the kubernetes provider (emulator)',
  () => {
    let emulator: KubernetesEmulator;
    let builder: TestDaemon;
    let daemon: TestDaemon;
    let directory = '';
    const namespace = `k8scompose-${randomBytes(3).toString('hex')}`;

    beforeAll(async () => {
      await testImage(docker, 'busybox');
      await testImage(docker, 'debian-base');
      emulator = await KubernetesEmulator.start(docker);
      directory = await mkdtemp(join(tmpdir(), 'gym-k8s-compose-'));
      const kubeconfigPath = join(directory, 'kubeconfig');
      await writeFile(kubeconfigPath, emulator.kubeconfig(NAMESPACE), { mode: 0o600 });
      builder = await startTestDaemon({ namespace: `${namespace}-build` }, { listen: true });
      daemon = await startTestDaemon(
        { namespace, providers: [{ name: 'kubernetes', options: { kubeconfigPath } }] },
        { listen: true },
      );
    }, 300_000);

    afterAll(async () => {
      await daemon?.cleanup();
      await builder?.cleanup();
      await emulator?.close();
      const images = await docker.listImages();
      for (const image of images)
        for (const tag of image.RepoTags ?? [])
          if (/^gym\/harbor-(terminal-bench-)?k8s-compose-/.test(tag))
            await docker
              .getImage(tag)
              .remove({ force: true })
              .catch(() => {});
      if (directory !== '') await rm(directory, { recursive: true, force: true });
    });

    /** Builds the rows' images on the Docker daemon, then runs the oracle and noop on the Kubernetes one. */
    async function oracleAndNoop(root: string, id: string): Promise<void> {
      const environment = await loadEnvironment('harbor');
      const rows = await readRows(root);
      const builderClient = new GymClient({ url: builder.address.url!, token: builder.token });
      await environment.implementation.prepareImages!({
        client: builderClient,
        environment,
        rows,
        logger: silentLogger,
      });
      const client = new GymClient({ url: daemon.address.url!, token: daemon.token });
      for (const [harnessName, expected] of [
        ['oracle', 1],
        ['noop', 0],
      ] as const) {
        const output = join(directory, `${harnessName}-${randomBytes(3).toString('hex')}.jsonl`);
        await runEval({
          client,
          environment,
          rows,
          harness: await new HarnessRegistry().create(harnessName),
          harnessName,
          modelName: 'none',
          numRepeats: 1,
          concurrency: 1,
          output,
          resume: false,
          maxInfraAttempts: 1,
          logger: silentLogger,
        });
        const failures = await readJsonl(output.replace(/\.jsonl$/, '_failures.jsonl'));
        expect(failures.map((row) => JSON.stringify(gymFields(row)).slice(0, 2000))).toEqual([]);
        const rollouts = await readJsonl(output);
        expect(rollouts.map((row) => [row.id, gymFields(row).outcome, row.reward])).toEqual([
          [id, 'reward', expected],
        ]);
      }
      expect(await client.listSandboxes()).toEqual([]);
      const pods = await fetch(
        `${emulator.url}/api/v1/namespaces/${NAMESPACE}/pods?labelSelector=gym.namespace%3D${namespace}`,
        { headers: { authorization: `Bearer ${emulator.token}` } },
      );
      expect(((await pods.json()) as { items: unknown[] }).items).toEqual([]);
    }

    it('runs a Terminal-Bench task with a server beside its client: the oracle scores 1, noop 0, no Pod left', async () => {
      const root = join(directory, 'terminal-bench');
      const tag = randomBytes(4).toString('hex');
      await terminalBenchTask(root, `k8s-compose-${tag}`, `s3cret-${tag}`);
      await oracleAndNoop(root, `k8s-compose-${tag}`);
    }, 900_000);

    it('runs a Harbor task whose MCP server is a Compose service, behind its health check: the oracle scores 1, noop 0', async () => {
      const root = join(directory, 'harbor');
      const tag = randomBytes(4).toString('hex');
      await harborTask(
        root,
        `k8s-compose-${tag}-mcp`,
        `mcp-${tag}`,
        'wget -q -O /dev/null http://mcp:8000/health && touch /tmp/healthchecked',
      );
      await oracleAndNoop(root, `gym/k8s-compose-${tag}-mcp`);
    }, 900_000);
  },
);
