/**
 * The egress contract (egress-cases.ts) on the Kubernetes provider against the real test cluster
 * of scripts/k8s/ (in CI, where .ci/run starts it; by hand: GYM_TEST_K8S_KUBECONFIG=$(scripts/k8s/up.sh); see
 * test/k8s-cluster/cluster.ts). The proxy is reached through the exec-channel relay; the Pods'
 * deny-all NetworkPolicy, read back from the real API server, stays without rules.
 */
import { NetworkingV1Api } from '@kubernetes/client-node';
import { expect } from 'vitest';
import { dockerTestEnvironment, testImage } from '../docker-available.ts';
import { clusterTestEnvironment, importImages, kubeConfigOf } from '../k8s-cluster/cluster.ts';
import { defineEgressCases } from './egress-cases.ts';

const cluster = await clusterTestEnvironment();
const { docker } = await dockerTestEnvironment();

defineEgressCases({
  name: 'kubernetes (real cluster)',
  timeoutMs: 120_000,
  setUp: async () => {
    const image = await testImage(docker, 'busybox');
    await importImages(image);
    const networking = kubeConfigOf(cluster).makeApiClient(NetworkingV1Api);
    return {
      image,
      // The fork case runs a parent and a child at the daemon's default 2 cpus each: requested in
      // full, the child never fits on the test cluster's 2-core node (a real scheduler reserves
      // requests; the emulator runs every Pod).
      providers: [
        { name: 'kubernetes', options: { kubeconfigPath: cluster.kubeconfigPath, requestFraction: 0.25 } },
      ],
      checkIsolation: async (namespace) => {
        const policy = await networking.readNamespacedNetworkPolicy({
          name: `gym-${namespace}-deny-all`,
          namespace: cluster.namespace,
        });
        expect(policy.spec?.policyTypes).toEqual(['Ingress', 'Egress']);
        expect(policy.spec?.ingress ?? []).toEqual([]);
        expect(policy.spec?.egress ?? []).toEqual([]);
      },
      tearDown: async () => {},
    };
  },
});
