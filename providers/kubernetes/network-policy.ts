/**
 * The NetworkPolicy that denies all ingress and egress to our Pods: created once per namespace
 * (with the first sandbox), and checked by `health()` to still deny everything.
 */
import type { NetworkingV1Api, V1NetworkPolicy } from '@kubernetes/client-node';
import { SYSTEM_LABELS } from '../shared/labels.ts';
import { apiFailure, wrapApiError } from './errors.ts';
import { KUBERNETES_LABEL_PREFIX } from './pod-manifest.ts';

export class DenyAllPolicy {
  readonly #networking: NetworkingV1Api;
  /** The Kubernetes namespace the Pods (and the policy) go in. */
  readonly #namespace: string;
  /** The deployment's namespace (ours, in the Pods' labels). */
  readonly #deploymentNamespace: string;
  /** The policy's creation, once per provider. */
  #creation: Promise<void> | null = null;

  constructor(networking: NetworkingV1Api, namespace: string, deploymentNamespace: string) {
    this.#networking = networking;
    this.#namespace = namespace;
    this.#deploymentNamespace = deploymentNamespace;
  }

  /** The NetworkPolicy that cuts our Pods off (one per deployment namespace). */
  get name(): string {
    return `gym-${this.#deploymentNamespace}-deny-all`;
  }

  /** Creates the deny-all NetworkPolicy for our Pods unless it exists. */
  ensure(): Promise<void> {
    this.#creation ??= (async () => {
      const body: V1NetworkPolicy = {
        apiVersion: 'networking.k8s.io/v1',
        kind: 'NetworkPolicy',
        metadata: {
          name: this.name,
          labels: { [`${KUBERNETES_LABEL_PREFIX}${SYSTEM_LABELS.namespace}`]: this.#deploymentNamespace },
        },
        spec: {
          podSelector: {
            matchLabels: {
              [`${KUBERNETES_LABEL_PREFIX}${SYSTEM_LABELS.namespace}`]: this.#deploymentNamespace,
            },
          },
          policyTypes: ['Ingress', 'Egress'],
        },
      };
      try {
        await this.#networking.createNamespacedNetworkPolicy({ namespace: this.#namespace, body });
      } catch (error) {
        if (apiFailure(error).code !== 409) throw wrapApiError(error, 'NetworkPolicy create');
      }
    })();
    this.#creation.catch(() => {
      this.#creation = null;
    });
    return this.#creation;
  }

  /** What is wrong with the policy, or null when it denies all traffic (or need not exist yet). */
  async problem(): Promise<string | null> {
    try {
      const policy = await this.#networking.readNamespacedNetworkPolicy({
        name: this.name,
        namespace: this.#namespace,
      });
      const types = policy.spec?.policyTypes ?? [];
      if (
        !types.includes('Ingress') ||
        !types.includes('Egress') ||
        (policy.spec?.ingress?.length ?? 0) > 0 ||
        (policy.spec?.egress?.length ?? 0) > 0
      ) {
        return `NetworkPolicy ${this.#namespace}/${this.name} no longer denies all traffic; delete it and the next create restores it`;
      }
    } catch (error) {
      const { code } = apiFailure(error);
      if (code !== 404) return wrapApiError(error, 'NetworkPolicy read').message;
      // Created with the first sandbox; before that there is nothing to isolate.
      if (this.#creation !== null) return `NetworkPolicy ${this.#namespace}/${this.name} is missing`;
    }
    return null;
  }
}
