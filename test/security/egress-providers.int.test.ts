/**
 * The egress contract (egress-cases.ts) on the providers that run on the engine here: Docker, and
 * Kubernetes through the test-only API emulator (Pods are engine containers with no network;
 * the proxy is reached through the exec-channel relay, and the deny-all NetworkPolicy stays as
 * it was). The SSH runtimes' rows are in test/hpc/ (apptainer-egress, enroot-egress).
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'vitest';
import { dockerTestEnvironment, testImage } from '../docker-available.ts';
import { KubernetesEmulator } from '../k8s-emulator/emulator.ts';
import { defineEgressCases } from './egress-cases.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const K8S_NAMESPACE = 'gym-egress-test';

defineEgressCases({
  name: 'docker',
  ...(skipReason === undefined ? {} : { skipReason }),
  timeoutMs: 60_000,
  setUp: async () => ({ image: await testImage(docker, 'busybox'), tearDown: async () => {} }),
});

defineEgressCases({
  name: 'kubernetes (emulator)',
  ...(skipReason === undefined ? {} : { skipReason }),
  timeoutMs: 120_000,
  setUp: async () => {
    const image = await testImage(docker, 'busybox');
    const emulator = await KubernetesEmulator.start(docker);
    const directory = await mkdtemp(join(tmpdir(), 'gym-k8s-egress-'));
    const kubeconfigPath = join(directory, 'kubeconfig');
    await writeFile(kubeconfigPath, emulator.kubeconfig(K8S_NAMESPACE), { mode: 0o600 });
    return {
      image,
      providers: [{ name: 'kubernetes', options: { kubeconfigPath } }],
      checkIsolation: async (namespace) => {
        // The proxy rides the relay: the Pods' policy still lets nothing in or out.
        const policies = emulator.recorded('networkpolicies', K8S_NAMESPACE) as Array<{
          metadata: { name: string };
          spec: { policyTypes?: string[]; ingress?: unknown[]; egress?: unknown[] };
        }>;
        const policy = policies.find((entry) => entry.metadata.name === `gym-${namespace}-deny-all`);
        expect(policy?.spec.policyTypes).toEqual(['Ingress', 'Egress']);
        expect(policy?.spec.ingress ?? []).toEqual([]);
        expect(policy?.spec.egress ?? []).toEqual([]);
      },
      tearDown: async () => {
        await emulator.close();
        await rm(directory, { recursive: true, force: true });
      },
    };
  },
});
