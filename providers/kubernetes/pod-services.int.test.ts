/**
 * A sandbox's companion services through the emulator (`test/k8s-emulator/`, whose sidecars are
 * engine containers joined to the Pod's namespace: `sidecars.ts` says what of the kubelet that
 * reproduces). The same cases run on the real cluster in `pod-services.cluster.int.test.ts`.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { KubeConfig } from '@kubernetes/client-node';
import { afterAll } from 'vitest';
import { dockerTestEnvironment, testImage } from '../../test/docker-available.ts';
import { testContext } from '../../test/fixtures/provider-context.ts';
import { KubernetesEmulator } from '../../test/k8s-emulator/emulator.ts';
import { KubernetesProvider } from './kubernetes-provider.ts';
import { describePodServices } from './pod-services.cases.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const busybox = skipReason === undefined ? await testImage(docker, 'busybox') : 'gym/busybox:missing';
const NAMESPACE = 'gym-test';
const emulator = skipReason === undefined ? await KubernetesEmulator.start(docker) : null;
const directory = await mkdtemp(join(tmpdir(), 'gym-k8s-services-'));
const kubeConfig = new KubeConfig();
if (emulator !== null) {
  await writeFile(join(directory, 'kubeconfig'), emulator.kubeconfig(NAMESPACE), { mode: 0o600 });
  kubeConfig.loadFromString(emulator.kubeconfig(NAMESPACE));
}
const provider = new KubernetesProvider(kubeConfig, testContext({ namespace: 'services' }));

afterAll(async () => {
  await provider.close();
  await emulator?.close();
  await rm(directory, { recursive: true, force: true });
});

describePodServices({
  name: 'kubernetes through the emulator',
  image: busybox,
  kubeConfig: () => kubeConfig,
  namespace: NAMESPACE,
  provider: () => provider,
  ...(skipReason === undefined ? {} : { skipReason }),
});
