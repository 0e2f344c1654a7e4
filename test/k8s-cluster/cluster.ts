/**
 * The real one-node cluster of `scripts/k8s/` for tests: which kubeconfig to use, and the images
 * its node needs, put there from the local Docker engine (`scripts/k8s/images.sh`, no registry).
 * Tests that need it are `*.cluster.int.test.ts` files, run when `GYM_TEST_K8S_KUBECONFIG` names the
 * kubeconfig `scripts/k8s/up.sh` printed.
 */
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { KubeConfig } from '@kubernetes/client-node';

const run = promisify(execFile);
const scripts = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'scripts', 'k8s');

export interface ClusterTestEnvironment {
  /** The path of the daemon's kubeconfig (a ServiceAccount with the documented Role). */
  kubeconfigPath: string;
  /** Its text, to make variants of (another server, no credentials). */
  kubeconfig: string;
  /** The namespace of its context. */
  namespace: string;
}

/**
 * The cluster `GYM_TEST_K8S_KUBECONFIG` names. The `*.cluster.int.test.ts` files run only when it
 * is set (vitest.config.ts), so there is no skipping: a cluster named but unusable fails them.
 */
export async function clusterTestEnvironment(): Promise<ClusterTestEnvironment> {
  const kubeconfigPath = process.env.GYM_TEST_K8S_KUBECONFIG;
  if (kubeconfigPath === undefined || kubeconfigPath === '')
    throw new Error('GYM_TEST_K8S_KUBECONFIG is not set: start the test cluster with scripts/k8s/up.sh');
  const kubeconfig = await readFile(kubeconfigPath, 'utf8');
  const parsed = new KubeConfig();
  parsed.loadFromString(kubeconfig);
  const namespace = parsed.getContextObject(parsed.getCurrentContext())?.namespace ?? 'default';
  return { kubeconfigPath, kubeconfig, namespace };
}

/** A client configuration for the daemon's identity on the cluster. */
export function kubeConfigOf(cluster: ClusterTestEnvironment): KubeConfig {
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromString(cluster.kubeconfig);
  return kubeConfig;
}

/** Puts images of the local Docker engine into the cluster's node (idempotent). */
export async function importImages(...images: string[]): Promise<void> {
  await run(join(scripts, 'images.sh'), images, { maxBuffer: 1024 * 1024 });
}
