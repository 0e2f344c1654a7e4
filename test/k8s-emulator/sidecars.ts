/**
 * A Pod's native sidecars (init containers with `restartPolicy: Always`) in the emulator.
 * TEST-ONLY: never shipped.
 *
 * What it reproduces: each sidecar is a container of the engine joined to the Pod's network
 * namespace (`container:<id>` of the Pod's first container, so they share loopback and its hosts
 * file, where the Pod's `hostAliases` are), started one after another in the Pod's order, the
 * next only once the one before runs and passed its exec `startupProbe` (period, timeout,
 * failure threshold as the kubelet counts them); the status of each in `initContainerStatuses`
 * (`started` once its probe passed); the Pod not Ready until every sidecar started; a sidecar
 * whose probe fails its threshold killed (exit 137), as the kubelet kills it.
 *
 * What it does not: the Pod's main container holds the namespace here, so it runs from the start
 * (a kubelet's pause container holds it and the main container starts after the sidecars; this
 * one reports `PodInitializing` meanwhile); restarts (a killed or exited sidecar stays
 * terminated, where a kubelet restarts it and counts `restartCount`); readiness and liveness
 * probes; init containers that are not sidecars (refused).
 */
import type Docker from 'dockerode';

// biome-ignore lint/suspicious/noExplicitAny: the emulator stores whatever JSON the validators accepted.
type Json = Record<string, any>;

export interface Sidecar {
  name: string;
  image: string;
  containerId: string | null;
  /** Running and past its startup probe (the kubelet's `started`). */
  started: boolean;
  /** Why its container could not be made. */
  waiting: { reason: string; message: string } | null;
}

/** The Pod's sidecars, before any starts; init containers that are not sidecars are refused. */
export function sidecarsOf(spec: Json): Sidecar[] | string {
  const init: Json[] = spec.initContainers ?? [];
  const other = init.find((container) => container.restartPolicy !== 'Always');
  if (other !== undefined) return `init container ${other.name}: the emulator runs only native sidecars`;
  return init.map((container) => ({
    name: container.name,
    image: container.image,
    containerId: null,
    started: false,
    waiting: null,
  }));
}

/** The Docker form of what a Pod's container asks (user, limits, hardening), as for the main container. */
function engineOptions(spec: Json, container: Json): { User?: string; HostConfig: Docker.HostConfig } {
  const security: Json = { ...(spec.securityContext ?? {}), ...(container.securityContext ?? {}) };
  const limits: Json = container.resources?.limits ?? {};
  const user =
    security.runAsUser === undefined
      ? undefined
      : `${security.runAsUser}${security.runAsGroup === undefined ? '' : `:${security.runAsGroup}`}`;
  const memory = limits.memory === undefined ? undefined : Math.floor(quantity(limits.memory));
  const cpu = limits.cpu === undefined ? undefined : Math.round(quantity(limits.cpu) * 1e9);
  return {
    ...(user === undefined ? {} : { User: user }),
    HostConfig: {
      ...(memory === undefined ? {} : { Memory: memory, MemorySwap: memory }),
      ...(cpu === undefined ? {} : { NanoCpus: cpu }),
      CapDrop: security.capabilities?.drop ?? [],
      CapAdd: security.capabilities?.add ?? [],
      SecurityOpt: security.allowPrivilegeEscalation === false ? ['no-new-privileges'] : [],
      Privileged: security.privileged === true,
    },
  };
}

/** `1500m`, `64Mi`, `2`: the quantities our Pods use. */
function quantity(text: string | number): number {
  const match = /^([0-9.]+)(m|Ki|Mi|Gi)?$/.exec(String(text));
  if (match === null) return Number(text);
  const scale: Record<string, number> = { m: 0.001, Ki: 1024, Mi: 1024 ** 2, Gi: 1024 ** 3 };
  return Number(match[1]) * (match[2] === undefined ? 1 : (scale[match[2]] ?? 1));
}

/** One try of an exec probe: true when the command exits 0 within the timeout. */
async function probeOnce(
  docker: Docker,
  containerId: string,
  argv: string[],
  timeoutMs: number,
): Promise<boolean> {
  try {
    const exec = await docker
      .getContainer(containerId)
      .exec({ Cmd: argv, AttachStdout: true, AttachStderr: true });
    const stream = await exec.start({});
    stream.resume();
    const until = Date.now() + timeoutMs;
    for (;;) {
      const inspected = await exec.inspect();
      if (!inspected.Running) return inspected.ExitCode === 0;
      if (Date.now() > until) return false;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  } catch {
    return false;
  }
}

/**
 * Starts the sidecars in order, each after the one before started; stops at the first that exits
 * or fails its probe (the kubelet would restart it and never start what comes after).
 */
export async function startSidecars(
  docker: Docker,
  spec: Json,
  sidecars: Sidecar[],
  namespaceHolder: string,
  nameOf: (sidecar: string) => string,
  labels: Record<string, string>,
  deleted: () => boolean,
): Promise<void> {
  for (const [index, sidecar] of sidecars.entries()) {
    if (deleted()) return;
    const container: Json = spec.initContainers[index];
    const options = engineOptions(spec, container);
    try {
      await docker.getImage(container.image).inspect();
    } catch {
      sidecar.waiting = {
        reason: 'ErrImagePull',
        message: `failed to pull and unpack image "${container.image}": not found (the emulator pulls nothing)`,
      };
      return;
    }
    try {
      const created = await docker.createContainer({
        name: nameOf(sidecar.name),
        Image: container.image,
        ...(container.command === undefined ? {} : { Entrypoint: container.command }),
        ...(container.args === undefined ? {} : { Cmd: container.args }),
        Env: (container.env ?? []).map((variable: Json) => `${variable.name}=${variable.value ?? ''}`),
        ...(container.workingDir === undefined ? {} : { WorkingDir: container.workingDir }),
        ...(options.User === undefined ? {} : { User: options.User }),
        Labels: labels,
        HostConfig: { ...options.HostConfig, NetworkMode: `container:${namespaceHolder}` },
      });
      sidecar.containerId = created.id;
      await created.start();
    } catch (error) {
      sidecar.waiting = { reason: 'CreateContainerError', message: (error as Error).message };
      return;
    }
    const probe: Json | undefined = container.startupProbe;
    if (probe === undefined) {
      sidecar.started = true;
      continue;
    }
    const periodMs = Number(probe.periodSeconds ?? 10) * 1000;
    const timeoutMs = Number(probe.timeoutSeconds ?? 1) * 1000;
    const threshold = Number(probe.failureThreshold ?? 3);
    await new Promise((resolve) => setTimeout(resolve, Number(probe.initialDelaySeconds ?? 0) * 1000));
    for (let failures = 0; ; ) {
      if (deleted()) return;
      const running = await docker
        .getContainer(sidecar.containerId)
        .inspect()
        .then((inspected) => inspected.State.Running)
        .catch(() => false);
      if (!running) return;
      if (await probeOnce(docker, sidecar.containerId, probe.exec.command, timeoutMs)) {
        sidecar.started = true;
        break;
      }
      failures += 1;
      if (failures >= threshold) {
        await docker
          .getContainer(sidecar.containerId)
          .kill({ signal: 'SIGKILL' })
          .catch(() => {});
        return;
      }
      await new Promise((resolve) => setTimeout(resolve, periodMs));
    }
  }
}

/** The sidecars' `initContainerStatuses`. */
export async function sidecarStatuses(docker: Docker, sidecars: readonly Sidecar[]): Promise<Json[]> {
  return Promise.all(
    sidecars.map(async (sidecar) => {
      const base = {
        name: sidecar.name,
        image: sidecar.image,
        restartCount: 0,
        ready: false,
        started: false,
      };
      if (sidecar.waiting !== null) return { ...base, state: { waiting: sidecar.waiting } };
      if (sidecar.containerId === null) return { ...base, state: { waiting: { reason: 'PodInitializing' } } };
      const inspected = await docker
        .getContainer(sidecar.containerId)
        .inspect()
        .catch(() => null);
      if (inspected === null)
        return { ...base, state: { terminated: { exitCode: 137, reason: 'ContainerStatusUnknown' } } };
      if (inspected.State.Running)
        return {
          ...base,
          ready: sidecar.started,
          started: sidecar.started,
          state: { running: { startedAt: inspected.State.StartedAt } },
        };
      if (inspected.State.Status === 'created')
        return { ...base, state: { waiting: { reason: 'ContainerCreating' } } };
      const exitCode = inspected.State.ExitCode;
      return {
        ...base,
        state: {
          terminated: {
            exitCode,
            reason: exitCode === 0 ? 'Completed' : 'Error',
            finishedAt: inspected.State.FinishedAt,
          },
        },
      };
    }),
  );
}

/** Every sidecar started (the kubelet starts the main containers then). */
export function sidecarsStarted(sidecars: readonly Sidecar[]): boolean {
  return sidecars.every((sidecar) => sidecar.started);
}

/** Removes the sidecars' containers (before the namespace holder's). */
export async function removeSidecars(docker: Docker, sidecars: readonly Sidecar[]): Promise<void> {
  await Promise.all(
    sidecars.map((sidecar) =>
      sidecar.containerId === null
        ? undefined
        : docker
            .getContainer(sidecar.containerId)
            .remove({ force: true })
            .catch(() => {}),
    ),
  );
}
