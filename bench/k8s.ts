/**
 * The Kubernetes provider's own overhead, through the test-only API emulator (the emulator and
 * the Docker engine behind it make absolute times meaningless, so what counts is the ratio), or
 * against the real test cluster of scripts/k8s/ when `GYM_TEST_K8S_KUBECONFIG` names its
 * kubeconfig (`scripts/k8s/up.sh` prints it; the image goes to its node first): in
 * one run against one Pod, client-node's raw `Exec` of `true` (open, status, close: the
 * baseline), the provider's one-shot exec, its session exec, and create (Pod to Ready). Prints
 * progress on stderr and one JSON line on stdout.
 *
 *   npm run bench:k8s            (BENCH_K8S_COUNT=100, BENCH_K8S_CREATES=5 by default)
 */
import { readFile } from 'node:fs/promises';
import { PassThrough } from 'node:stream';
import { Exec, KubeConfig, type V1Status, VersionApi } from '@kubernetes/client-node';
import { systemClock } from '../core/clock.ts';
import { createId } from '../core/ids.ts';
import { silentLogger } from '../core/logger.ts';
import { ExecRequestSchema } from '../core/schemas/exec.ts';
import { SandboxSpecSchema } from '../core/schemas/sandbox.ts';
import { createDockerClient } from '../providers/docker/index.ts';
import { KubernetesProvider } from '../providers/kubernetes/index.ts';
import { SANDBOX_CONTAINER } from '../providers/kubernetes/kubernetes-provider.ts';
import { testImage } from '../test/docker-available.ts';
import { importImages } from '../test/k8s-cluster/cluster.ts';
import { KubernetesEmulator } from '../test/k8s-emulator/emulator.ts';
import { percentile, round, timeSequential } from './stats.ts';

const count = Number(process.env.BENCH_K8S_COUNT ?? 100);
const creates = Number(process.env.BENCH_K8S_CREATES ?? 5);
const warmup = 5;
const clusterKubeconfig = process.env.GYM_TEST_K8S_KUBECONFIG || undefined;
const docker = createDockerClient();
const image = await testImage(docker, 'busybox');
if (clusterKubeconfig !== undefined) await importImages(image);
const emulator = clusterKubeconfig === undefined ? await KubernetesEmulator.start(docker) : null;
const kubeConfig = new KubeConfig();
kubeConfig.loadFromString(
  clusterKubeconfig === undefined ? emulator!.kubeconfig('bench') : await readFile(clusterKubeconfig, 'utf8'),
);
/** The Kubernetes namespace of the Pods: the kubeconfig context's. */
const namespace = kubeConfig.getContextObject(kubeConfig.getCurrentContext())?.namespace ?? 'default';
const through =
  emulator === null
    ? `the test cluster of scripts/k8s (Kubernetes ${(await kubeConfig.makeApiClient(VersionApi).getCode()).gitVersion})`
    : 'test-only API emulator over the Docker engine';
const provider = new KubernetesProvider(kubeConfig, {
  namespace: 'bench',
  daemonId: createId('daemon'),
  logger: silentLogger,
  clock: systemClock,
  maxLifetimeSeconds: 3600,
  stateDirectory: '/nonexistent',
});
const spec = SandboxSpecSchema.parse({ image, ttlSeconds: 600 });

/** What a caller of client-node does for one command: exec, wait for the status, let it close. */
function rawExec(pod: string): Promise<V1Status> {
  return new Promise((resolve, reject) => {
    new Exec(kubeConfig)
      .exec(
        namespace,
        pod,
        SANDBOX_CONTAINER,
        ['true'],
        new PassThrough().resume(),
        null,
        null,
        false,
        resolve,
      )
      .catch(reject);
  });
}

try {
  const sandbox = await provider.create(spec);
  const pod = provider.podName(sandbox.id);
  const oneShotRequest = ExecRequestSchema.parse({ argv: ['true'] });
  const sessionRequest = ExecRequestSchema.parse({ argv: ['true'], session: 'bench' });
  process.stderr.write(`bench:k8s: ${count} sequential \`true\` per mode, ${creates} creates\n`);
  // Interleaved in rounds so drift in the engine's speed hits both alike.
  const raw: number[] = [];
  const oneShot: number[] = [];
  const rounds = 4;
  for (let round_ = 0; round_ < rounds; round_ += 1) {
    raw.push(...(await timeSequential(count / rounds, round_ === 0 ? warmup : 0, () => rawExec(pod))));
    oneShot.push(
      ...(await timeSequential(count / rounds, round_ === 0 ? warmup : 0, () =>
        provider.exec(sandbox.id, oneShotRequest),
      )),
    );
  }
  const session = await timeSequential(count, warmup, () => provider.exec(sandbox.id, sessionRequest));
  const created: string[] = [];
  const create = await timeSequential(creates, 0, async () => {
    created.push((await provider.create(spec)).id);
  });
  await Promise.all([sandbox.id, ...created].map((id) => provider.destroy(id)));
  const rawP50Ms = percentile(raw, 0.5);
  const oneShotP50Ms = percentile(oneShot, 0.5);
  console.log(
    JSON.stringify({
      bench: 'k8s',
      through,
      count,
      rawExecP50Ms: round(rawP50Ms),
      oneShotP50Ms: round(oneShotP50Ms),
      oneShotOverhead: round(oneShotP50Ms / rawP50Ms - 1),
      sessionP50Ms: round(percentile(session, 0.5)),
      createP50Ms: round(percentile(create, 0.5)),
      createP99Ms: round(percentile(create, 0.99)),
      creates,
    }),
  );
} finally {
  await provider.close();
  await emulator?.close();
}
