/**
 * A sandbox's companion services on the real test cluster (`scripts/k8s/up.sh`; see
 * `kubernetes-provider.cluster.int.test.ts`): the kubelet's own native sidecars, startup probes,
 * hostAliases and start order, the same cases as on the emulator (`pod-services.cases.ts`).
 */
import { afterAll } from 'vitest';
import { dockerTestEnvironment, testImage } from '../../test/docker-available.ts';
import { testContext } from '../../test/fixtures/provider-context.ts';
import { clusterTestEnvironment, importImages, kubeConfigOf } from '../../test/k8s-cluster/cluster.ts';
import { KubernetesProvider } from './kubernetes-provider.ts';
import { describePodServices } from './pod-services.cases.ts';

const cluster = await clusterTestEnvironment();
const { docker } = await dockerTestEnvironment();
const busybox = await testImage(docker, 'busybox');
await importImages(busybox);
const kubeConfig = kubeConfigOf(cluster);
const provider = new KubernetesProvider(kubeConfig, testContext({ namespace: 'services' }), {
  imagePullPolicy: 'IfNotPresent',
});
afterAll(() => provider.close());

describePodServices({
  name: 'kubernetes on a real cluster',
  image: busybox,
  kubeConfig: () => kubeConfig,
  namespace: cluster.namespace,
  provider: () => provider,
});
