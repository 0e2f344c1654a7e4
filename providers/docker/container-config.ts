/**
 * What the engine is asked to create for a sandbox: its container's entrypoint (the exec
 * helper's keeper, or an idle shell loop), environment, labels and the host configuration that
 * confines it (capabilities, no new privileges, read-only kernel paths, resources, binds, the
 * runtime's own needs). Pure: the provider gathers the inputs, this file says what they become.
 */
import type Docker from 'dockerode';
import type { SandboxSpec } from '../../core/schemas/sandbox.ts';
import { EXEC_HELPER_MOUNT } from './one-shot-exec.ts';
import { DEFAULT_CAPABILITIES, IDLE_SCRIPT, SANDBOX_READONLY_PATHS } from './options.ts';
import type { RuntimeTier } from './runtime-tier.ts';

export interface SandboxContainerInputs {
  name: string;
  spec: SandboxSpec;
  labels: Record<string, string>;
  /** Host folders bound read-only (already resolved against the provider's allow-list). */
  binds: ReadonlyArray<{ hostPath: string; path: string }>;
  /** Capabilities the spec adds to the defaults (allowed by the provider's options). */
  capAdd: readonly string[];
  shmSizeMiB: number | undefined;
  /** The exec helper's bind (`host:container:ro`), or null when the helper is not mounted. */
  helperBind: string | null;
  /** The engine's init (tini) for the idle loop; the helper's keeper reaps on its own. */
  init: boolean;
  /** The OCI runtime asked for (gVisor's `runsc`), or the engine's default. */
  runtime: string | undefined;
  tier: RuntimeTier;
  /** What this engine's creates need besides (Podman's ulimits). */
  engineHostConfig: Partial<Docker.HostConfig>;
}

/** The create options of a sandbox's container. */
export function sandboxContainerOptions(inputs: SandboxContainerInputs): Docker.ContainerCreateOptions {
  const { spec, tier, helperBind, binds } = inputs;
  const { resources } = spec;
  const memoryBytes =
    resources.memoryMiB === undefined
      ? undefined
      : (resources.memoryMiB + tier.memoryOverheadMiB) * 1024 * 1024;
  return {
    name: inputs.name,
    Image: spec.image,
    // With the exec helper mounted, PID 1 is the helper's keeper: it runs nothing of the
    // sandbox's own (a shell loop would run the sandbox's `sleep`, which an agent can replace
    // to be respawned after every stop), cannot be killed from inside, and reaps orphans.
    Entrypoint: helperBind === null ? ['sh', '-c', IDLE_SCRIPT] : [EXEC_HELPER_MOUNT, '--keeper'],
    Cmd: [],
    Env: Object.entries(spec.env).map(([name, value]) => `${name}=${value}`),
    Labels: inputs.labels,
    ...(spec.workdir === undefined ? {} : { WorkingDir: spec.workdir }),
    ...(spec.user === undefined ? {} : { User: spec.user }),
    HostConfig: {
      Init: helperBind === null ? inputs.init : false,
      // runc's; another runtime (gVisor) is left its own defaults.
      ...(inputs.runtime === undefined ? { ReadonlyPaths: SANDBOX_READONLY_PATHS } : {}),
      NetworkMode: spec.network,
      // Its companion services share its network namespace: their names are loopback here.
      ...serviceHosts(spec),
      CapDrop: ['ALL'],
      CapAdd: [...new Set([...DEFAULT_CAPABILITIES, ...inputs.capAdd])],
      SecurityOpt: ['no-new-privileges'],
      LogConfig: { Type: 'none', Config: {} },
      ...(memoryBytes === undefined ? {} : { Memory: memoryBytes, MemorySwap: memoryBytes }),
      ...(resources.cpus === undefined ? {} : { NanoCpus: Math.round(resources.cpus * 1e9) }),
      // Under gVisor the host's counts include its kernel's own threads and memory.
      ...(resources.pidsLimit === undefined ? {} : { PidsLimit: resources.pidsLimit + tier.pidsOverhead }),
      ...(resources.diskMiB === undefined ? {} : { StorageOpt: { size: `${resources.diskMiB}M` } }),
      ...(inputs.shmSizeMiB === undefined ? {} : { ShmSize: inputs.shmSizeMiB * 1024 * 1024 }),
      ...(binds.length === 0 && helperBind === null
        ? {}
        : {
            Binds: [
              ...binds.map((bind) => `${bind.hostPath}:${bind.path}:ro`),
              ...(helperBind === null ? [] : [helperBind]),
            ],
          }),
      ...(resources.gpus === undefined || resources.gpus === 0
        ? {}
        : { DeviceRequests: [{ Driver: 'nvidia', Count: resources.gpus, Capabilities: [['gpu']] }] }),
      ...(inputs.runtime === undefined ? {} : { Runtime: inputs.runtime }),
      ...inputs.engineHostConfig,
      // gVisor mounts a tmpfs of its own on an empty /tmp, where no archive upload reaches.
      ...(tier.hasGuestKernel ? { Mounts: [{ Type: 'volume' as const, Source: '', Target: '/tmp' }] } : {}),
    },
  };
}

/** Each companion service's name resolving to loopback (see `service-group.ts`). */
function serviceHosts(spec: SandboxSpec): Partial<Docker.HostConfig> {
  const services = spec.services ?? [];
  return services.length === 0 ? {} : { ExtraHosts: services.map((service) => `${service.name}:127.0.0.1`) };
}
