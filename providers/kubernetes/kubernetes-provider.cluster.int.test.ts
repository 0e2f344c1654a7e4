/**
 * The Kubernetes provider against a real cluster: the one-node cluster `scripts/k8s/up.sh` starts
 * (kube-apiserver, kube-controller-manager, kube-scheduler and kubelet as `scripts/k8s/gymkube`
 * pins them, etcd, containerd), through a ServiceAccount holding only the Role the docs tell users
 * to grant. In CI (.ci/run starts the cluster), or by hand: `GYM_TEST_K8S_KUBECONFIG=$(scripts/k8s/up.sh) npx vitest run <this file>`
 * (vitest.config.ts leaves it out of runs without that variable).
 *
 * A real Pod has `eth0`: `network: none` on Kubernetes is the deny-all NetworkPolicy, which the
 * cluster's policy engine enforces (here kube-router's controller, `gymnetpol`). So the contract's
 * no-network case gets a peer (`networkPolicyPeer`): a listener Pod outside the policy, which a
 * sandbox of a provider without the policy reaches first; then a sandbox under it must not.
 *
 * The emulator (`kubernetes-provider.int.test.ts`) stays for what this cluster cannot be made to
 * do on demand: evict a Pod, add a node with GPUs, kill a whole container on OOM (this host's
 * cgroups are v1, where the kubelet cannot set `memory.oom.group`), speak only v4.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { request as httpsRequest } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import { afterAll, describe, expect, it } from 'vitest';
import { ExecRequestSchema } from '../../core/schemas/exec.ts';
import { SandboxSpecSchema } from '../../core/schemas/sandbox.ts';
import { parseOrThrow } from '../../core/validate.ts';
import { dockerTestEnvironment, testImage } from '../../test/docker-available.ts';
import { testContext } from '../../test/fixtures/provider-context.ts';
import { clusterTestEnvironment, importImages } from '../../test/k8s-cluster/cluster.ts';
import { describeSandboxProviderContract } from '../contract/index.ts';
import { createKubernetesProvider, KubernetesProvider } from './index.ts';

const cluster = await clusterTestEnvironment();
const { docker } = await dockerTestEnvironment();
const busybox = await testImage(docker, 'busybox');
await importImages(busybox);

const directory = await mkdtemp(join(tmpdir(), 'gym-k8s-cluster-'));
// The same cluster entry on a port nobody listens on.
const unreachablePath = join(directory, 'unreachable');
await writeFile(
  unreachablePath,
  cluster.kubeconfig.replace(/server: "?https:\/\/[^"\s,}]+"?/, 'server: "https://127.0.0.1:9"'),
  { mode: 0o600 },
);
afterAll(() => rm(directory, { recursive: true, force: true }));

// The no-network case's peer: a listener Pod no policy selects (no `gym.namespace` label), and the
// proof that it is reachable where no policy applies (a sandbox of a provider without the policy).
const peerName = `gym-netpeer-${Math.random().toString(36).slice(2, 8)}`;
const banner = `peer-${peerName}`;
const peerCore = new KubeConfig();
peerCore.loadFromString(cluster.kubeconfig);
const peerApi = peerCore.makeApiClient(CoreV1Api);
const unpoliced = new KubernetesProvider(peerCore, testContext({ namespace: 'netctl' }), {
  networkPolicy: false,
});
let peerAddress: Promise<{ host: string; port: number; banner: string }> | null = null;
afterAll(async () => {
  await peerApi
    .deleteNamespacedPod({ name: peerName, namespace: cluster.namespace, gracePeriodSeconds: 0 })
    .catch(() => undefined);
  await unpoliced.close();
});
async function networkPolicyPeer(): Promise<{ host: string; port: number; banner: string }> {
  peerAddress ??= (async () => {
    await peerApi.createNamespacedPod({
      namespace: cluster.namespace,
      body: {
        metadata: { name: peerName, labels: { role: 'netpeer' } },
        spec: {
          containers: [
            {
              name: 'listener',
              image: busybox,
              imagePullPolicy: 'IfNotPresent',
              command: ['sh', '-c', `while true; do echo ${banner} | nc -l -p 8080; done`],
            },
          ],
          terminationGracePeriodSeconds: 0,
        },
      },
    });
    let host = '';
    for (let tries = 0; host === '' && tries < 240; tries++) {
      const pod = await peerApi.readNamespacedPod({ name: peerName, namespace: cluster.namespace });
      if (pod.status?.phase === 'Running' && pod.status.podIP) host = pod.status.podIP;
      else await new Promise((resolve) => setTimeout(resolve, 500));
    }
    if (host === '') throw new Error(`the peer Pod ${peerName} did not run`);
    const control = await unpoliced.create(parseOrThrow(SandboxSpecSchema, { image: busybox }, 'spec'));
    try {
      const reached = await unpoliced.exec(
        control.id,
        parseOrThrow(
          ExecRequestSchema,
          { command: `nc -w 3 ${host} 8080 </dev/null`, timeoutMs: 30_000 },
          'exec',
        ),
      );
      if (!reached.stdout.includes(banner))
        throw new Error(
          `a Pod outside the policy does not reach the peer either: ${JSON.stringify(reached)}`,
        );
    } finally {
      await unpoliced.destroy(control.id);
    }
    return { host, port: 8080, banner };
  })();
  return peerAddress;
}

describeSandboxProviderContract({
  name: 'kubernetes on a real cluster (busybox)',
  image: busybox,
  capabilities: {
    sessions: true,
    snapshot: false,
    gatewayReach: true,
    timeoutKill: 'tagged',
    pidsLimit: false,
  },
  createProvider: () => createKubernetesProvider({ kubeconfigPath: cluster.kubeconfigPath }, testContext()),
  createUnreachableProvider: () =>
    createKubernetesProvider({ kubeconfigPath: unreachablePath }, testContext()),
  testTimeoutMs: 120_000,
  networkPolicyPeer,
});

describe('kubernetes provider on a real cluster', () => {
  const context = testContext({ namespace: 'real' });
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromString(cluster.kubeconfig);
  const core = kubeConfig.makeApiClient(CoreV1Api);
  const provider = new KubernetesProvider(kubeConfig, context);
  const created: string[] = [];
  const spec = (overrides: Record<string, unknown> = {}) =>
    parseOrThrow(SandboxSpecSchema, { image: busybox, ...overrides }, 'spec');
  const run = (id: string, request: Record<string, unknown>) =>
    provider.exec(id, parseOrThrow(ExecRequestSchema, request, 'exec'));

  afterAll(async () => {
    await Promise.all(created.map((id) => provider.destroy(id)));
    await provider.close();
  });

  it('is a real API server: no request without credentials, and the daemon holds only the documented Role', async () => {
    const server = kubeConfig.getCurrentCluster()!.server;
    const ca = Buffer.from(kubeConfig.getCurrentCluster()!.caData!, 'base64');
    const anonymous = await new Promise<number>((resolve, reject) => {
      const request = httpsRequest(
        `${server}/api/v1/namespaces/${cluster.namespace}/pods`,
        { ca },
        (response) => {
          response.resume();
          resolve(response.statusCode ?? 0);
        },
      );
      request.on('error', reject);
      request.end();
    });
    expect(anonymous).toBe(401);
    // What the Role does not grant: Secrets, and Pods of another namespace.
    await expect(core.listNamespacedSecret({ namespace: cluster.namespace })).rejects.toMatchObject({
      code: 403,
    });
    await expect(core.listNamespacedPod({ namespace: 'default' })).rejects.toMatchObject({ code: 403 });
    const health = await provider.health();
    expect(health.ok).toBe(true);
    // What the API cannot show, said where `gym doctor` prints it.
    expect(health.message).toMatch(/holds only if the cluster's network plugin enforces NetworkPolicy/);
  });

  it('runs its Pods locked down as the kubelet applies it: seccomp, no privilege gain, the seven capabilities', async () => {
    const info = await provider.create(spec({ resources: { cpus: 0.5, memoryMiB: 96 } }));
    created.push(info.id);
    const status = await run(info.id, {
      command: 'grep -E "^(CapEff|NoNewPrivs|Seccomp):" /proc/self/status',
    });
    expect(status.stdout).toMatch(/NoNewPrivs:\s*1/);
    // 2: a seccomp filter (RuntimeDefault), which the emulator does not apply through the API.
    expect(status.stdout).toMatch(/Seccomp:\s*2/);
    const capEff = BigInt(`0x${/CapEff:\s*([0-9a-f]+)/.exec(status.stdout)?.[1]}`);
    const allowed = [0, 1, 3, 4, 5, 6, 7].reduce((mask, bit) => mask | (1n << BigInt(bit)), 0n);
    expect(capEff & ~allowed).toBe(0n);
    // The limits reach the container's cgroup (v1 on this node).
    const memory = await run(info.id, {
      command: 'cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max',
    });
    expect(Number(memory.stdout.trim())).toBe(96 * 1024 * 1024);
  });

  it('reports sandbox_gone for a command whose Pod is deleted behind its back', async () => {
    const info = await provider.create(spec());
    created.push(info.id);
    const running = run(info.id, { command: 'sleep 30', timeoutMs: 60_000 });
    await new Promise((resolve) => setTimeout(resolve, 300));
    await core.deleteNamespacedPod({
      name: provider.podName(info.id),
      namespace: cluster.namespace,
      gracePeriodSeconds: 0,
    });
    expect((await running).status).toBe('sandbox_gone');
    await expect(provider.get(info.id)).rejects.toMatchObject({ code: 'SANDBOX_NOT_FOUND' });
  });

  it('loses the sandbox when the kubelet ends its Pod at the hard deadline (activeDeadlineSeconds)', async () => {
    // The deadline counts from the Pod's start, before it is Running: 3 s was less than a start
    // took on a loaded machine (the Pod ended before it was ready); 20 s leaves room for that.
    const shortLived = new KubernetesProvider(
      kubeConfig,
      testContext({ namespace: 'deadline', maxLifetimeSeconds: 20 }),
    );
    try {
      const info = await shortLived.create(spec());
      const result = await shortLived.exec(
        info.id,
        parseOrThrow(ExecRequestSchema, { command: 'sleep 60', timeoutMs: 90_000 }, 'exec'),
      );
      expect(result.status).toBe('sandbox_gone');
      expect((await shortLived.get(info.id)).state).toBe('failed');
      await shortLived.destroy(info.id);
    } finally {
      await shortLived.close();
    }
  });
});
