/**
 * A sandbox's companion services on Docker (`spec.services`): one container per service, joined
 * to the sandbox container's network namespace (`container:<id>`), so the group shares loopback
 * the way a Kubernetes Pod does and has no network of its own that another task could reach. The
 * sandbox container's hosts file names every service 127.0.0.1, and its companions share that
 * file with the namespace.
 *
 * Leak-free by construction: a service container carries its sandbox's identity labels (so a
 * reaper knows whose it is) under a name that is not a sandbox's (so no listing takes it for
 * one), it is created only after its sandbox container exists, and it is removed before it. So a
 * crash at any point leaves either nothing or a sandbox container, which the daemon's reconcile
 * adopts or destroys, and destroying it removes its services (found by label when this process
 * did not create them).
 */
import type Docker from 'dockerode';
import { GymError } from '../../core/errors.ts';
import type { SandboxSpec } from '../../core/schemas/sandbox.ts';
import { type ServiceSpec, serviceStartOrder } from '../../core/schemas/services.ts';
import { removeContainer } from './container-listing.ts';
import type { EngineTraits } from './engine-kind.ts';
import { DEFAULT_CAPABILITIES, SANDBOX_READONLY_PATHS } from './options.ts';

/** The label that marks a service container and names its service. */
export const SERVICE_LABEL = 'gym.service';
/** The label holding the sandbox id a service container belongs to (also in its identity labels). */
export const SERVICE_OF_LABEL = 'gym.service-of';
/** How often a service's state is read while the create waits for it (start, health). */
const SERVICE_POLL_MS = 100;
/**
 * The longest a create waits for its services to run and be healthy, whatever their health
 * checks say (a task's intervals and retries could otherwise hold a create, and its admission
 * slot, for days). Past it the create fails naming the service still waited for.
 */
export const SERVICES_READY_TIMEOUT_MS = 10 * 60_000;
/** Bytes of a failed service's log quoted in the create's error. */
const LOG_TAIL_BYTES = 2_000;
/** Each service's log is kept (bounded) so a failure can quote it. */
const SERVICE_LOG_CONFIG = { Type: 'json-file', Config: { 'max-size': '1m', 'max-file': '1' } };

const NS_PER_MS = 1_000_000;

/** The name of a service's container, beside its sandbox container's. */
export function serviceContainerName(sandboxContainer: string, service: string): string {
  return `${sandboxContainer}--svc-${service}`;
}

/** The services of the sandboxes of one Docker provider. */
export class ServiceGroups {
  readonly #docker: Docker;
  /** The OCI runtime the sandbox uses, given to its services too. */
  readonly #runtime: string | undefined;
  readonly #engine: Pick<EngineTraits, 'hostConfig'>;
  /** The sandbox container's name (service containers are named after it). */
  readonly #containerName: (id: string) => string;
  readonly #readyTimeoutMs: number;
  /** The service names of each sandbox this process created ([] for none); others are found by label. */
  readonly #known = new Map<string, string[]>();

  constructor(
    docker: Docker,
    runtime: string | undefined,
    engine: Pick<EngineTraits, 'hostConfig'>,
    containerName: (id: string) => string,
    readyTimeoutMs = SERVICES_READY_TIMEOUT_MS,
  ) {
    this.#readyTimeoutMs = readyTimeoutMs;
    this.#docker = docker;
    this.#runtime = runtime;
    this.#engine = engine;
    this.#containerName = containerName;
  }

  /**
   * Creates and starts the sandbox's services in `dependsOn` order, each waited for as its
   * dependants ask (`started`, or `healthy`), then waits until every service with a health check
   * is healthy. The sandbox container runs already (it owns the network namespace).
   * @throws GymError `SERVICE_UNHEALTHY` naming the service that exited or became unhealthy,
   *   with the end of its log; the caller removes the group.
   */
  async start(
    id: string,
    spec: SandboxSpec,
    sandboxContainerId: string,
    labels: Record<string, string>,
  ): Promise<void> {
    const services = spec.services ?? [];
    this.#known.set(
      id,
      services.map((service) => service.name),
    );
    if (services.length === 0) return;
    const order = serviceStartOrder(services);
    if (typeof order === 'string') throw new GymError('VALIDATION_FAILED', `spec.services: ${order}`);
    const engineHostConfig = await this.#engine.hostConfig();
    const containers = new Map<string, Docker.Container>();
    const deadlineMs = Date.now() + this.#readyTimeoutMs;
    for (const service of order) {
      for (const dependency of service.dependsOn) {
        const container = containers.get(dependency.service);
        if (container !== undefined && dependency.condition === 'healthy')
          await this.#waitHealthy(dependency.service, container, deadlineMs);
      }
      const container = await this.#docker.createContainer(
        this.#serviceOptions(id, spec, service, sandboxContainerId, labels, engineHostConfig),
      );
      containers.set(service.name, container);
      await container.start();
    }
    for (const service of order) {
      const container = containers.get(service.name);
      if (container !== undefined) await this.#waitHealthy(service.name, container, deadlineMs);
    }
  }

  #serviceOptions(
    id: string,
    spec: SandboxSpec,
    service: ServiceSpec,
    sandboxContainerId: string,
    labels: Record<string, string>,
    engineHostConfig: Partial<Docker.HostConfig>,
  ): Docker.ContainerCreateOptions {
    const { resources } = spec;
    const memoryBytes = resources.memoryMiB === undefined ? undefined : resources.memoryMiB * 1024 * 1024;
    const health = service.healthcheck;
    return {
      name: serviceContainerName(this.#containerName(id), service.name),
      Image: service.image,
      ...(service.entrypoint === undefined ? {} : { Entrypoint: service.entrypoint }),
      ...(service.command === undefined ? {} : { Cmd: service.command }),
      Env: Object.entries(service.env).map(([name, value]) => `${name}=${value}`),
      // The identity labels say whose it is; the service label keeps it out of sandbox listings.
      Labels: { ...labels, [SERVICE_LABEL]: service.name, [SERVICE_OF_LABEL]: id },
      ...(service.workdir === undefined ? {} : { WorkingDir: service.workdir }),
      ...(service.user === undefined ? {} : { User: service.user }),
      ...(health === undefined
        ? {}
        : {
            Healthcheck: {
              Test: ['CMD', ...health.argv],
              Interval: health.intervalMs * NS_PER_MS,
              Timeout: health.timeoutMs * NS_PER_MS,
              StartPeriod: health.startPeriodMs * NS_PER_MS,
              Retries: health.retries,
            },
          }),
      HostConfig: {
        // The sandbox's own namespace: loopback shared with it and nothing else.
        NetworkMode: `container:${sandboxContainerId}`,
        Init: true,
        CapDrop: ['ALL'],
        CapAdd: [...DEFAULT_CAPABILITIES],
        SecurityOpt: ['no-new-privileges'],
        ...(this.#runtime === undefined
          ? { ReadonlyPaths: SANDBOX_READONLY_PATHS }
          : { Runtime: this.#runtime }),
        LogConfig: SERVICE_LOG_CONFIG,
        // Each service is held to the sandbox's own limits.
        ...(memoryBytes === undefined ? {} : { Memory: memoryBytes, MemorySwap: memoryBytes }),
        ...(resources.cpus === undefined ? {} : { NanoCpus: Math.round(resources.cpus * 1e9) }),
        ...(resources.pidsLimit === undefined ? {} : { PidsLimit: resources.pidsLimit }),
        ...engineHostConfig,
      },
    };
  }

  /** Until the service runs and (with a health check) is healthy; an exit or `unhealthy` throws. */
  async #waitHealthy(name: string, container: Docker.Container, deadlineMs: number): Promise<void> {
    for (;;) {
      if (Date.now() > deadlineMs)
        throw await this.#failed(
          name,
          container,
          `did not become healthy within ${Math.round(this.#readyTimeoutMs / 1000)} s`,
        );
      const inspected = await container.inspect();
      const { State } = inspected;
      if (State.Status === 'exited' || State.Status === 'dead')
        throw await this.#failed(name, container, `exited with code ${State.ExitCode}`);
      const health = State.Health?.Status;
      if (health === 'unhealthy')
        throw await this.#failed(name, container, 'is unhealthy: its health check failed its retries');
      if (State.Status === 'running' && (health === undefined || health === 'healthy' || health === 'none'))
        return;
      await new Promise((resolve) => setTimeout(resolve, SERVICE_POLL_MS));
    }
  }

  async #failed(name: string, container: Docker.Container, what: string): Promise<GymError> {
    const log = await container
      .logs({ stdout: true, stderr: true, tail: 20 })
      .then((buffer) => demuxedText(buffer as unknown as Buffer))
      .catch(() => '');
    const tail = log.length > LOG_TAIL_BYTES ? log.slice(-LOG_TAIL_BYTES) : log;
    // The task's fault (its service exits or fails its own check), not the backend's: a runner
    // makes it a task error, not an outage to retry.
    return new GymError(
      'SERVICE_UNHEALTHY',
      `service ${name} ${what}${tail.trim() === '' ? '' : `; its log ends: ${tail.trim()}`}`,
      { details: { service: name, reason: what } },
    );
  }

  /**
   * Removes the sandbox's service containers (before its own container: see the top of this
   * file). Those this process created are known by name; others are found by label.
   */
  async remove(id: string): Promise<void> {
    const known = this.#known.get(id);
    const names =
      known ??
      (
        await this.#docker.listContainers({
          all: true,
          filters: { label: [`${SERVICE_OF_LABEL}=${id}`] },
        })
      ).flatMap((container) => (container.Names ?? []).map((name) => name.replace(/^\//, '')));
    const containerNames =
      known === undefined
        ? names
        : names.map((service) => serviceContainerName(this.#containerName(id), service));
    await Promise.all(containerNames.map((name) => removeContainer(this.#docker.getContainer(name))));
    this.#known.delete(id);
  }

  /** The services, then the sandbox container: one that is left always has a sandbox to reap it by. */
  async removeGroup(id: string, sandboxContainer: Docker.Container): Promise<void> {
    await this.remove(id);
    await removeContainer(sandboxContainer);
  }
}

/** A log read without a TTY: 8-byte frame headers before each chunk. */
function demuxedText(buffer: Buffer): string {
  const parts: Buffer[] = [];
  let offset = 0;
  while (offset + 8 <= buffer.length) {
    const size = buffer.readUInt32BE(offset + 4);
    parts.push(buffer.subarray(offset + 8, offset + 8 + size));
    offset += 8 + size;
  }
  return Buffer.concat(parts).toString('utf8');
}
