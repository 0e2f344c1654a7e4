/**
 * The Kubernetes provider's entry: builds the client configuration from the provider's options
 * (a kubeconfig path, else `$KUBECONFIG`, `~/.kube/config`, then in-cluster) and the provider.
 * Loaded only when a daemon is configured with this provider (see `../registry.ts`).
 */
import { KubeConfig } from '@kubernetes/client-node';
import { GymError } from '../../core/errors.ts';
import { parseOrThrow } from '../../core/validate.ts';
import type { SandboxProviderFactory } from '../sandbox-provider.ts';
import {
  KubernetesProvider,
  type KubernetesProviderOptions,
  KubernetesProviderOptionsSchema,
} from './kubernetes-provider.ts';

export type { KubernetesProviderOptions };
export { KubernetesProvider, KubernetesProviderOptionsSchema };

/** Loads the kubeconfig the options name, and selects their context. */
export function loadKubeConfig(
  options: Pick<KubernetesProviderOptions, 'kubeconfigPath' | 'context'>,
): KubeConfig {
  const kubeConfig = new KubeConfig();
  try {
    if (options.kubeconfigPath === undefined) kubeConfig.loadFromDefault();
    else kubeConfig.loadFromFile(options.kubeconfigPath);
  } catch (error) {
    throw new GymError('VALIDATION_FAILED', `cannot load the kubeconfig: ${(error as Error).message}`, {
      cause: error,
    });
  }
  if (options.context !== undefined) {
    if (kubeConfig.getContextObject(options.context) === null) {
      throw new GymError('VALIDATION_FAILED', `the kubeconfig has no context "${options.context}"`);
    }
    kubeConfig.setCurrentContext(options.context);
  }
  return kubeConfig;
}

export const createKubernetesProvider: SandboxProviderFactory = (options, context) => {
  const parsed = parseOrThrow(KubernetesProviderOptionsSchema, options ?? {}, 'kubernetes provider options');
  return new KubernetesProvider(loadKubeConfig(parsed), context, parsed);
};
