/**
 * A sandbox's companion services on Kubernetes (`spec.services`): extra containers of the
 * sandbox's own Pod, so the group shares the Pod's network namespace (loopback between them, no
 * network of its own another task could reach, the Pod's deny-all NetworkPolicy over all of it)
 * and lives and dies with the Pod (deleting it, or the kubelet's `activeDeadlineSeconds`, ends
 * every container; a crashed daemon leaves one Pod, which reconcile adopts or deletes).
 *
 * Each service is a native sidecar (an init container with `restartPolicy: Always`, Kubernetes
 * 1.29+), in `dependsOn` order: the kubelet starts an init container only once the one before it
 * has started and passed its `startupProbe`, and the sandbox's own container only after all of
 * them. A service's health check becomes that startup probe (exec of its argv), so every service
 * is started, and healthy when it has a check, before the next one starts: stricter than
 * Compose's `started` condition, which only asks that a dependency runs. `hostAliases` names each
 * service 127.0.0.1 in every container's hosts file. Each service gets the sandbox container's
 * hardening and limits.
 *
 * What Docker's `HEALTHCHECK` becomes: period = interval, timeout = timeout (whole seconds, at
 * least 1, as probes count them), failure threshold = retries plus the tries that fit in the
 * start period (failures there do not count on Docker; here they use up that allowance).
 */
import type { V1Container, V1ContainerStatus, V1HostAlias, V1Pod, V1Probe } from '@kubernetes/client-node';
import { GymError } from '../../core/errors.ts';
import type { SandboxSpec } from '../../core/schemas/sandbox.ts';
import { type ServiceHealthcheck, type ServiceSpec, serviceStartOrder } from '../../core/schemas/services.ts';

/** A service's container name in the Pod: a prefix no sandbox container has. */
const SERVICE_CONTAINER_PREFIX = 'svc-';

export function serviceContainerName(service: string): string {
  return `${SERVICE_CONTAINER_PREFIX}${service}`;
}

/** What the sandbox container has that each service gets too. */
export interface ServiceContainerBase {
  imagePullPolicy?: string;
  resources: V1Container['resources'];
  securityContext: V1Container['securityContext'];
}

/** Whole seconds, at least 1, from milliseconds (a probe's unit). */
function seconds(ms: number): number {
  return Math.max(1, Math.ceil(ms / 1000));
}

/** Docker's `HEALTHCHECK` as a startup probe (see the top of this file). */
export function startupProbe(health: ServiceHealthcheck): V1Probe {
  const periodSeconds = seconds(health.intervalMs);
  return {
    exec: { command: [...health.argv] },
    periodSeconds,
    timeoutSeconds: seconds(health.timeoutMs),
    failureThreshold: health.retries + Math.ceil(health.startPeriodMs / (periodSeconds * 1000)),
    successThreshold: 1,
  };
}

/**
 * The Pod's service containers, in start order, and the host aliases naming them; nothing for a
 * spec without services.
 * @throws GymError `VALIDATION_FAILED` for what a Pod cannot carry (a name too long for a
 *   container name beside the prefix, a user that is not numeric).
 */
export function podServices(
  spec: SandboxSpec,
  base: ServiceContainerBase,
  numericUser: (user: string | undefined) => { uid: number; gid?: number } | undefined,
): { initContainers: V1Container[]; hostAliases: V1HostAlias[] } {
  const services = spec.services ?? [];
  if (services.length === 0) return { initContainers: [], hostAliases: [] };
  const order = serviceStartOrder(services);
  if (typeof order === 'string') throw new GymError('VALIDATION_FAILED', `spec.services: ${order}`);
  const initContainers = order.map((service): V1Container => {
    const name = serviceContainerName(service.name);
    if (name.length > 63) {
      throw new GymError(
        'VALIDATION_FAILED',
        `service ${service.name}: the kubernetes provider names its container ${name}, longer than a container name's 63 characters; take a service name of at most ${63 - SERVICE_CONTAINER_PREFIX.length}`,
        { details: { service: service.name } },
      );
    }
    const user = numericUser(service.user);
    return {
      name,
      image: service.image,
      ...(base.imagePullPolicy === undefined ? {} : { imagePullPolicy: base.imagePullPolicy }),
      // A native sidecar: it runs beside the sandbox for the Pod's life and gates what starts after it.
      restartPolicy: 'Always',
      ...(service.entrypoint === undefined ? {} : { command: [...service.entrypoint] }),
      ...(service.command === undefined ? {} : { args: [...service.command] }),
      env: Object.entries(service.env).map(([envName, value]) => ({ name: envName, value })),
      ...(service.workdir === undefined ? {} : { workingDir: service.workdir }),
      resources: base.resources,
      securityContext: {
        ...base.securityContext,
        ...(user === undefined
          ? {}
          : {
              runAsUser: user.uid,
              ...(user.gid === undefined ? {} : { runAsGroup: user.gid }),
              runAsNonRoot: user.uid !== 0,
            }),
      },
      ...(service.healthcheck === undefined ? {} : { startupProbe: startupProbe(service.healthcheck) }),
    };
  });
  return {
    initContainers,
    hostAliases: [{ ip: '127.0.0.1', hostnames: order.map((service) => service.name) }],
  };
}

/** Waiting reasons of a service container that will not resolve by themselves. */
const SERVICE_FATAL_REASONS = new Set([
  'ErrImagePull',
  'ImagePullBackOff',
  'InvalidImageName',
  'ErrImageNeverPull',
  'CreateContainerConfigError',
  'CreateContainerError',
  'RunContainerError',
  'CrashLoopBackOff',
]);

/** Exit codes of a process ended by the kubelet's TERM or KILL (a failed startup probe). */
const KILLED_EXIT_CODES = new Set([137, 143]);

/**
 * As Docker says it: the sandbox removed, the service named (its log is not read: no pods/log
 * grant). A service that exited or failed its own check is the task's fault (`SERVICE_UNHEALTHY`,
 * a task error to a runner); one whose container cannot start (its image) is not.
 */
function failed(
  id: string,
  service: string,
  what: string,
  code: 'SERVICE_UNHEALTHY' | 'SANDBOX_START_FAILED' = 'SERVICE_UNHEALTHY',
): GymError {
  return new GymError(code, `sandbox ${id} failed to start and was removed: service ${service} ${what}`, {
    details: { sandboxId: id, service, reason: what },
  });
}

/**
 * Why the Pod's services will not all come up, read from its status, or null while none has
 * failed: a service that exited (a sidecar the kubelet restarted counts: it exited once), one
 * killed because its health check failed its retries, one whose container cannot start.
 */
export function servicesProblem(id: string, pod: V1Pod, services: readonly ServiceSpec[]): GymError | null {
  if (services.length === 0) return null;
  const statuses = new Map<string, V1ContainerStatus>(
    (pod.status?.initContainerStatuses ?? []).map((status) => [status.name, status]),
  );
  for (const service of services) {
    const status = statuses.get(serviceContainerName(service.name));
    if (status === undefined) continue;
    const waiting = status.state?.waiting;
    if (waiting?.reason !== undefined && SERVICE_FATAL_REASONS.has(waiting.reason))
      return failed(
        id,
        service.name,
        `cannot start (${waiting.reason}): ${waiting.message ?? ''}`.trim(),
        'SANDBOX_START_FAILED',
      );
    const terminated = status.state?.terminated ?? status.lastState?.terminated;
    if (terminated === undefined && status.restartCount === 0) continue;
    const exitCode = terminated?.exitCode;
    if (service.healthcheck !== undefined && status.started !== true && KILLED_EXIT_CODES.has(exitCode ?? -1))
      return failed(id, service.name, 'is unhealthy: its health check failed its retries');
    return failed(id, service.name, `exited with code ${exitCode ?? '?'}`);
  }
  return null;
}
