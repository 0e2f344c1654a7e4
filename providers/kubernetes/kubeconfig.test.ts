/**
 * Which cluster, user and namespace the Kubernetes provider's options select: a kubeconfig by
 * path or from `$KUBECONFIG` (client-node's default loading), its current context or the one the
 * `context` option names, and a clear error for a context the file lacks.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { testContext } from '../../test/fixtures/provider-context.ts';
import { createKubernetesProvider, type KubernetesProvider, loadKubeConfig } from './index.ts';

/** Two clusters, two users, two contexts; `alpha` is current. */
const TWO_CONTEXTS = [
  'apiVersion: v1',
  'kind: Config',
  'clusters:',
  '- name: cluster-alpha',
  '  cluster: { server: "https://127.0.0.1:6441", insecure-skip-tls-verify: true }',
  '- name: cluster-beta',
  '  cluster: { server: "https://127.0.0.1:6442", insecure-skip-tls-verify: true }',
  'users:',
  '- name: user-alpha',
  '  user: { token: token-alpha }',
  '- name: user-beta',
  '  user: { token: token-beta }',
  'contexts:',
  '- name: alpha',
  '  context: { cluster: cluster-alpha, user: user-alpha, namespace: ns-alpha }',
  '- name: beta',
  '  context: { cluster: cluster-beta, user: user-beta, namespace: ns-beta }',
  'current-context: alpha',
  '',
].join('\n');

describe('kubeconfig loading for the kubernetes provider', () => {
  let directory: string;
  let path: string;
  const savedKubeconfig = process.env.KUBECONFIG;

  beforeAll(async () => {
    directory = await mkdtemp(join(tmpdir(), 'gym-kubeconfig-'));
    path = join(directory, 'config');
    await writeFile(path, TWO_CONTEXTS, { mode: 0o600 });
  });
  afterEach(() => {
    if (savedKubeconfig === undefined) delete process.env.KUBECONFIG;
    else process.env.KUBECONFIG = savedKubeconfig;
  });
  afterAll(async () => {
    await rm(directory, { recursive: true, force: true });
  });

  it('uses the current context of a file given by path, with its cluster, user and namespace', async () => {
    const kubeConfig = loadKubeConfig({ kubeconfigPath: path });
    expect(kubeConfig.getCurrentContext()).toBe('alpha');
    expect(kubeConfig.getCurrentCluster()?.server).toBe('https://127.0.0.1:6441');
    expect(kubeConfig.getCurrentUser()?.token).toBe('token-alpha');
    const provider = (await createKubernetesProvider(
      { kubeconfigPath: path },
      testContext(),
    )) as KubernetesProvider;
    expect(provider.kubernetesNamespace).toBe('ns-alpha');
  });

  it('selects another context by name: its cluster, its user and its namespace', async () => {
    const kubeConfig = loadKubeConfig({ kubeconfigPath: path, context: 'beta' });
    expect(kubeConfig.getCurrentContext()).toBe('beta');
    expect(kubeConfig.getCurrentCluster()?.server).toBe('https://127.0.0.1:6442');
    expect(kubeConfig.getCurrentUser()?.token).toBe('token-beta');
    const provider = (await createKubernetesProvider(
      { kubeconfigPath: path, context: 'beta' },
      testContext(),
    )) as KubernetesProvider;
    expect(provider.kubernetesNamespace).toBe('ns-beta');
    // The namespace option still wins over the context's.
    const explicit = (await createKubernetesProvider(
      { kubeconfigPath: path, context: 'beta', namespace: 'elsewhere' },
      testContext(),
    )) as KubernetesProvider;
    expect(explicit.kubernetesNamespace).toBe('elsewhere');
  });

  it('loads $KUBECONFIG when no path is given, and honours the context there too', async () => {
    process.env.KUBECONFIG = path;
    expect(loadKubeConfig({}).getCurrentCluster()?.server).toBe('https://127.0.0.1:6441');
    const provider = (await createKubernetesProvider(
      { context: 'beta' },
      testContext(),
    )) as KubernetesProvider;
    expect(provider.kubernetesNamespace).toBe('ns-beta');
  });

  it('refuses a context the kubeconfig does not have, naming it', async () => {
    expect(() => loadKubeConfig({ kubeconfigPath: path, context: 'gamma' })).toThrow(
      expect.objectContaining({ code: 'VALIDATION_FAILED', message: expect.stringContaining('"gamma"') }),
    );
    process.env.KUBECONFIG = path;
    expect(() => createKubernetesProvider({ context: 'gamma' }, testContext())).toThrow(/no context "gamma"/);
  });

  it('refuses a kubeconfig path that does not exist, naming the cause', () => {
    expect(() => loadKubeConfig({ kubeconfigPath: join(directory, 'missing') })).toThrow(
      expect.objectContaining({
        code: 'VALIDATION_FAILED',
        message: expect.stringMatching(/cannot load the kubeconfig/),
      }),
    );
  });
});
