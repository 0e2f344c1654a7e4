/**
 * The Pod of a sandbox, as a manifest: identity in its labels (written by the caller), what is
 * not identity (the spec's user, network mode) in an annotation, the image in its spec. The Pod
 * idles under a shell loop with `restartPolicy: Never`, no service account token, all
 * capabilities dropped but the few a root shell needs, no privilege escalation, seccomp
 * `RuntimeDefault`, and `activeDeadlineSeconds` at the hard deadline (the kubelet ends the Pod
 * even if every daemon is gone). Resources: requests equal limits (cpu, memory), or the operator's
 * `requestFraction` of them, disk as
 * `ephemeral-storage`, GPUs as `nvidia.com/gpu` when the operator allows them. A spec's services
 * are sidecars of the same Pod (`pod-services.ts`).
 */
import type { V1Pod } from '@kubernetes/client-node';
import { GymError } from '../../core/errors.ts';
import type { SandboxSpec } from '../../core/schemas/sandbox.ts';
import type { KubernetesOptions } from './options.ts';
import { podServices } from './pod-services.ts';

/** Every label we write starts with this (as on Docker), so one selector finds all our Pods. */
export const KUBERNETES_LABEL_PREFIX = 'gym.';
/** Annotations hold what is not identity. */
const SPEC_ANNOTATION = 'gym.sandbox/spec';
/** The sandbox's container in its Pod. */
export const SANDBOX_CONTAINER = 'sandbox';

/** The capabilities a root shell, a package manager and a test suite need (as on Docker). */
export const DEFAULT_CAPABILITIES = ['CHOWN', 'DAC_OVERRIDE', 'FOWNER', 'FSETID', 'KILL', 'SETGID', 'SETUID'];

/** Keeps the container alive doing nothing; exits at once on the kubelet's TERM. */
const IDLE_SCRIPT = "trap 'exit 0' TERM INT; while :; do sleep 86400 & wait $!; done";

/** A spec's user as Kubernetes can take it: numbers only, since the image's names are not known before it runs. */
function numericUser(user: string | undefined): { uid: number; gid?: number } | undefined {
  if (user === undefined) return undefined;
  const match = /^(\d+)(?::(\d+))?$/.exec(user);
  if (match === null) {
    throw new GymError(
      'VALIDATION_FAILED',
      `the kubernetes provider takes the sandbox's user as uid or uid:gid (a Pod's securityContext has no user names): "${user}"`,
      { details: { user } },
    );
  }
  return { uid: Number(match[1]), ...(match[2] === undefined ? {} : { gid: Number(match[2]) }) };
}

/**
 * The Pod of sandbox `spec`, named `name`, with `labels` (its identity), ended by the kubelet
 * `maxLifetimeSeconds` after it starts.
 */
export function podManifest(
  spec: SandboxSpec,
  name: string,
  labels: Record<string, string>,
  options: KubernetesOptions,
  maxLifetimeSeconds: number,
): V1Pod {
  const { resources } = spec;
  const user = numericUser(spec.user);
  const limits: Record<string, string> = {};
  const milliCpus = resources.cpus === undefined ? undefined : Math.round(resources.cpus * 1000);
  if (milliCpus !== undefined) limits.cpu = `${milliCpus}m`;
  if (resources.memoryMiB !== undefined) limits.memory = `${resources.memoryMiB}Mi`;
  if (resources.diskMiB !== undefined) limits['ephemeral-storage'] = `${resources.diskMiB}Mi`;
  if (resources.gpus !== undefined && resources.gpus > 0) limits['nvidia.com/gpu'] = String(resources.gpus);
  // What the scheduler reserves on a node: the limits themselves by default (QoS Guaranteed), or
  // the operator's fraction of them (Burstable), so more sandboxes than a node's cores fit on it.
  const requests: Record<string, string> = {};
  // From the limit's whole millicores, so a request never exceeds its limit (4.03 * 1000 is 4030.0000000000005).
  if (milliCpus !== undefined)
    requests.cpu = `${Math.max(1, Math.ceil(milliCpus * options.requestFraction))}m`;
  if (resources.memoryMiB !== undefined)
    requests.memory = `${Math.max(1, Math.ceil(resources.memoryMiB * options.requestFraction))}Mi`;
  const hardening = {
    allowPrivilegeEscalation: false,
    privileged: false,
    capabilities: { drop: ['ALL'], add: DEFAULT_CAPABILITIES },
  };
  const imagePullPolicy =
    options.imagePullPolicy === undefined ? {} : { imagePullPolicy: options.imagePullPolicy };
  // The companion services (`pod-services.ts`): sidecars with the same hardening and limits.
  const services = podServices(
    spec,
    { ...imagePullPolicy, resources: { limits, requests }, securityContext: hardening },
    numericUser,
  );
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name,
      labels,
      annotations: {
        [SPEC_ANNOTATION]: JSON.stringify({
          user: spec.user ?? null,
          network: spec.network,
          workdir: spec.workdir ?? null,
          pidsLimit: resources.pidsLimit ?? null,
        }),
      },
    },
    spec: {
      restartPolicy: 'Never',
      automountServiceAccountToken: false,
      enableServiceLinks: false,
      terminationGracePeriodSeconds: Math.max(1, options.deleteGracePeriodSeconds),
      activeDeadlineSeconds: maxLifetimeSeconds,
      securityContext: {
        seccompProfile: { type: 'RuntimeDefault' },
      },
      ...(services.initContainers.length === 0
        ? {}
        : { initContainers: services.initContainers, hostAliases: services.hostAliases }),
      containers: [
        {
          name: SANDBOX_CONTAINER,
          image: spec.image,
          ...imagePullPolicy,
          command: ['sh', '-c', IDLE_SCRIPT],
          env: Object.entries(spec.env).map(([name, value]) => ({ name, value })),
          ...(spec.workdir === undefined ? {} : { workingDir: spec.workdir }),
          resources: { limits, requests },
          // The user on the container, not the Pod: a service runs as its own user, as on Docker.
          securityContext: {
            ...hardening,
            ...(user === undefined
              ? {}
              : {
                  runAsUser: user.uid,
                  ...(user.gid === undefined ? {} : { runAsGroup: user.gid }),
                  runAsNonRoot: user.uid !== 0,
                }),
          },
        },
      ],
      ...(options.runtimeClassName === undefined ? {} : { runtimeClassName: options.runtimeClassName }),
      ...(Object.keys(options.nodeSelector).length === 0 ? {} : { nodeSelector: options.nodeSelector }),
      ...(options.tolerations.length === 0 ? {} : { tolerations: options.tolerations }),
      ...(options.imagePullSecrets.length === 0
        ? {}
        : { imagePullSecrets: options.imagePullSecrets.map((secret) => ({ name: secret })) }),
    },
  };
}
