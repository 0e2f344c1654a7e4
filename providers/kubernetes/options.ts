/**
 * What an operator configures on the Kubernetes provider (the daemon's `providers.kubernetes`):
 * the cluster and namespace, how long a start may take, scheduling (runtime class, node
 * selector, tolerations, pull secrets), GPUs, the deny-all NetworkPolicy and gateway reach.
 */
import { z } from 'zod';
import { DEFAULT_RELAY_HELPER_PATH } from './gateway-relay.ts';

const TolerationSchema = z
  .object({
    key: z.string().optional(),
    operator: z.enum(['Exists', 'Equal']).optional(),
    value: z.string().optional(),
    effect: z.enum(['NoSchedule', 'PreferNoSchedule', 'NoExecute']).optional(),
    tolerationSeconds: z.number().int().optional(),
  })
  .strict();

export const KubernetesProviderOptionsSchema = z
  .object({
    /** A kubeconfig file; default: `$KUBECONFIG`, `~/.kube/config`, then in-cluster configuration. */
    kubeconfigPath: z.string().optional(),
    /** A context of the kubeconfig other than its current one. */
    context: z.string().optional(),
    /** The namespace the Pods go in; default: the context's, else `default`. */
    namespace: z
      .string()
      .regex(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/)
      .max(63)
      .optional(),
    /** How long a create waits for its Pod to be Ready (scheduling and image pull included). */
    createTimeoutMs: z.number().int().positive().max(3_600_000).default(120_000),
    /** Grace period of a destroy, in seconds (the Pod's shell exits at once on TERM). */
    deleteGracePeriodSeconds: z.number().int().min(0).max(300).default(1),
    /** A RuntimeClass for stronger isolation (gVisor, Kata). */
    runtimeClassName: z.string().optional(),
    nodeSelector: z.record(z.string(), z.string()).default({}),
    tolerations: z.array(TolerationSchema).default([]),
    /** Secrets (by name, in the namespace) the kubelet uses to pull images. */
    imagePullSecrets: z.array(z.string()).default([]),
    imagePullPolicy: z.enum(['Always', 'IfNotPresent', 'Never']).optional(),
    /**
     * The share of a sandbox's cpu and memory limits its Pod requests, i.e. what the scheduler
     * reserves on a node. 1 (the default): requests equal limits, QoS Guaranteed, a node holds
     * as many sandboxes as its cores and memory cover at their limits (the daemon's default
     * sandbox asks for 2 cpus). Below 1: Burstable Pods, more of them per node, which compete
     * for what they use past their requests and go first when the node runs short of memory.
     */
    requestFraction: z.number().positive().max(1).default(1),
    /** The nodes have NVIDIA GPUs and the device plugin: allow `resources.gpus`. */
    gpus: z.boolean().default(false),
    /** Create (once per namespace) and check a NetworkPolicy that denies all traffic to our Pods. */
    networkPolicy: z.boolean().default(true),
    /**
     * Gateway reach (`exposeGateway`) through a relay over an exec stream (`gateway-relay.ts`),
     * for a daemon outside the cluster. Off without the relay binary.
     */
    gatewayReach: z.boolean().default(true),
    /** The static relay copied into Pods (built by scripts/setup.sh). */
    relayHelperPath: z.string().startsWith('/').default(DEFAULT_RELAY_HELPER_PATH),
    /** Open relay connections per sandbox at most; one more is closed at once. */
    relayMaxConnections: z.number().int().positive().max(4096).default(32),
  })
  .strict();
export type KubernetesProviderOptions = z.input<typeof KubernetesProviderOptionsSchema>;
/** The options once parsed, defaults filled in. */
export type KubernetesOptions = z.output<typeof KubernetesProviderOptionsSchema>;
