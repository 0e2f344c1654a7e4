import { posix } from 'node:path';
import type { Readable } from 'node:stream';
import type Docker from 'dockerode';
import { z } from 'zod';
import { GymError } from '../../core/errors.ts';
import { createId } from '../../core/ids.ts';
import type { ExecRequest, ExecResult } from '../../core/schemas/exec.ts';
import {
  NetworkModeSchema,
  ResourcesSchema,
  type SandboxInfo,
  type SandboxSpec,
  type SandboxState,
} from '../../core/schemas/sandbox.ts';
import type { ToolchainCheckRequest, ToolchainCheckResult } from '../../core/schemas/toolchain.ts';
import { parseOrThrow } from '../../core/validate.ts';
import type {
  CreateOptions,
  ExecOptions,
  FileContent,
  ImageFilter,
  ImageInfo,
  ImageSource,
  ListFilter,
  ProviderCapabilities,
  ProviderContext,
  ProviderHealth,
  RelayStats,
  SandboxListing,
  SandboxProvider,
  WriteFileOptions,
} from '../sandbox-provider.ts';
import {
  abnormalEndResult,
  classifyAbnormalEnd,
  type ExecHooks,
  KEEPER_OOM_REASON,
  OomKillCounts,
  type SandboxLoss,
} from '../shared/abnormal-end.ts';
import { packSingleFile, readFileThroughLinks, rebaseArchive, spoolSafeArchive } from '../shared/archive.ts';
import {
  cannotStartResult,
  ExecOutput,
  markSandboxLost,
  OOM_COUNTER_COMMAND,
  SIGKILL_EXIT_CODE,
} from '../shared/exec-output.ts';
import {
  decodeLabels,
  encodeLabels,
  matchesListFilter,
  SYSTEM_LABELS,
  selectorLabels,
} from '../shared/labels.ts';
import { waitUntilReady } from '../shared/readiness.ts';
import type { ShellSession } from '../shared/shell-session.ts';
import { wrapDockerError } from './docker-errors.ts';
import { DockerImages } from './docker-images.ts';
import { openDockerSession, SessionNotStarted } from './docker-session.ts';
import { EngineTraits } from './engine-kind.ts';
import { GatewayRelays } from './gateway-relay.ts';
import { DEFAULT_SNAPSHOT_IMAGE_PREFIX, HostAccessPolicy } from './host-access.ts';
import { ImageSources, ImageSourcesSchema } from './image-sources.ts';
import { EXEC_HELPER_MOUNT, notStartedNote, runOneShotExec } from './one-shot-exec.ts';
import { refuseLinkedDirectories } from './path-guard.ts';
import { DEFAULT_EXEC_HELPER_PATH, detectHostControl, ProcessControl } from './process-control.ts';
import {
  checkEngineRuntime,
  engineKilled,
  GVISOR_LIMIT_REASON,
  GVISOR_OOM_REASON,
  type RuntimeTier,
  runtimeTier,
  stopGuestProcesses,
  watchSandboxEnd,
} from './runtime-tier.ts';
import { DockerToolchainCheck } from './toolchain-view.ts';

/** Every label we write starts with this, so one filter finds all our containers. */
export const DOCKER_LABEL_PREFIX = 'gym.';

/**
 * The keys of the sandbox's own user labels, comma-separated. A container inherits the labels of
 * its image, and a snapshot's image carries those of the sandbox it was taken from: only the keys
 * listed here are the sandbox's. (A container of an older daemon has no list: all are its own.)
 */
const USER_KEYS_LABEL = `${DOCKER_LABEL_PREFIX}user-keys`;

/**
 * The few capabilities a shell, a package manager and a test suite need when running as root in
 * the sandbox; everything else Docker grants by default (raw sockets, mknod, chroot, ...) is dropped.
 */
export const DEFAULT_CAPABILITIES = ['CHOWN', 'DAC_OVERRIDE', 'FOWNER', 'FSETID', 'KILL', 'SETGID', 'SETUID'];

/** Keeps the container alive doing nothing; the init process (tini) reaps zombies under it. */
const IDLE_SCRIPT = "trap 'exit 0' TERM INT; while :; do sleep 86400 & wait $!; done";

/**
 * The engine's default read-only paths (HostConfig.ReadonlyPaths replaces them, so they are
 * repeated), and the OOM score of the keeper, PID 1: root in the container could otherwise raise
 * it to 1000 (raising needs no capability), fill its memory, and have the kernel's OOM killer end
 * the keeper, and with it the sandbox. Left at 0 and out of reach, the keeper, the smallest
 * process there, is the OOM killer's last choice. (Lowering it, which would make it immune,
 * needs CAP_SYS_RESOURCE in the engine, which not every host grants; `task/1` is the same
 * process's other name.)
 */
export const SANDBOX_READONLY_PATHS = [
  '/proc/bus',
  '/proc/fs',
  '/proc/irq',
  '/proc/sys',
  '/proc/sysrq-trigger',
  '/proc/1/oom_score_adj',
  '/proc/1/oom_adj',
  '/proc/1/task/1/oom_score_adj',
  '/proc/1/task/1/oom_adj',
];

/** How long the engine may take to record the end of a container whose keeper was seen dead. */
const EXIT_RECORD_WAIT_MS = 5_000;

/** Exit codes the runtime gives when it could not start a command (126) or SIGKILLed it (137). */
const RUNTIME_EXIT_CODES = new Set([126, 137]);

/** How many files one `readFile` follows through symlinks before giving up (like the kernel's ELOOP). */

/**
 * Limits of an image build unless the options say otherwise: the values of the daemon's default
 * `defaults.resources` (a test holds them equal), which run a package install or a test suite.
 */
export const DEFAULT_BUILD_RESOURCES = { cpus: 2, memoryMiB: 4096, pidsLimit: 1024 } as const;

export const DockerProviderOptionsSchema = z
  .object({
    /** The engine's unix socket; default /var/run/docker.sock (or DOCKER_HOST as dockerode reads it). */
    socketPath: z.string().optional(),
    /** Run tini as PID 1 to reap zombies (recommended). */
    init: z.boolean().default(true),
    /** The engine has GPUs and the NVIDIA runtime: allow `resources.gpus`. */
    gpus: z.boolean().default(false),
    /** Storage is overlay2 on xfs with pquota: allow `resources.diskMiB`. */
    diskQuota: z.boolean().default(false),
    /** An OCI runtime other than the engine's default (for example `runsc` for gVisor). */
    runtime: z.string().optional(),
    /**
     * Gateway reach (`exposeGateway`): a port on the sandbox's loopback relayed to the daemon's
     * gateway socket (the engine must run on this host and the daemon as root, with `nsenter`):
     * how agents in network-less sandboxes reach the gateway. The daemon itself holds the
     * listening socket; see `gateway-relay.ts` for what a relay costs.
     */
    gatewayReach: z.boolean().default(true),
    /** Open relay connections per sandbox at most; one more is closed at once. */
    relayMaxConnections: z.number().int().positive().max(4096).default(32),
    /**
     * A relay connection with no traffic for this long is closed. Above the gateway's default
     * upstream timeout (10 min), so a slow model answer is never cut.
     */
    relayIdleTimeoutMs: z
      .number()
      .int()
      .positive()
      .default(15 * 60_000),
    /**
     * The static exec helper (`exec-helper/gym-exec.c`, built by scripts/setup.sh) mounted into
     * every sandbox, so a timed-out command is killed from the host through its own cgroup. When
     * it is missing (or the host has no cgroup v2, or the engine is remote), timeouts fall back to
     * a kill script inside the sandbox, and `capabilities.timeoutKill` says `tagged`.
     */
    execHelperPath: z.string().startsWith('/').default(DEFAULT_EXEC_HELPER_PATH),
    /**
     * Whether a confined session shell talks to the daemon over pipes the exec helper makes
     * (`session-pipes.ts`), not through the engine's exec stream. On by default; off is how it
     * worked before, kept for comparison (`bench:scale --engine-sessions`) and as a way back.
     */
    sessionPipes: z.boolean().default(true),
    /**
     * Host directories that `readOnlyBinds` may mount (each with what lies under it; symbolic
     * links are resolved before the check). Default none. The engine's socket, or a directory
     * holding it, is refused unless listed exactly: it makes the sandbox root on the host.
     */
    allowedHostPaths: z.array(z.string().startsWith('/')).default([]),
    /** Capabilities that `capAdd` may add beyond the defaults. Default none. */
    allowedCapabilities: z.array(z.string().regex(/^[A-Z_]+$/)).default([]),
    /** The `network` modes specs may ask for. Default `none` only: `host` shares the host's network. */
    allowedNetworkModes: z
      .array(NetworkModeSchema)
      .refine((modes) => modes.includes('none'), 'must include none, the mode of every spec that names none')
      .default(['none']),
    /**
     * Image name prefixes that `snapshot` may write; a snapshot never replaces an existing image
     * that is not itself a snapshot. Default `gym-snapshot/`, so base images stay untouched.
     */
    snapshotImagePrefixes: z.array(z.string().min(1)).default([DEFAULT_SNAPSHOT_IMAGE_PREFIX]),
    /**
     * Limits of the containers that build images (a plan's steps, a derived image's command):
     * they run commands from datasets (a Dockerfile's RUN lines, a task's setup), which must not
     * fork-bomb the host or take its memory. Each unset field defaults to the same value as the
     * daemon's `defaults.resources`.
     */
    /**
     * Where a missing image may be loaded from (a folder of `docker save` tarballs, a registry
     * mirror of the operator's); nothing is pulled without it. See `image-sources.ts`.
     */
    imageSources: ImageSourcesSchema.default({}),
    buildResources: z
      .object({
        cpus: ResourcesSchema.shape.cpus.unwrap().default(DEFAULT_BUILD_RESOURCES.cpus),
        memoryMiB: ResourcesSchema.shape.memoryMiB.unwrap().default(DEFAULT_BUILD_RESOURCES.memoryMiB),
        pidsLimit: ResourcesSchema.shape.pidsLimit.unwrap().default(DEFAULT_BUILD_RESOURCES.pidsLimit),
      })
      .strict()
      .prefault({}),
  })
  .strict();
export type DockerProviderOptions = z.input<typeof DockerProviderOptionsSchema>;

/** What a spec's `providerOptions` may say to the Docker provider. */
export const DockerSpecOptionsSchema = z
  .object({
    /** Capabilities to add back on top of the defaults (for example `NET_BIND_SERVICE`). */
    capAdd: z
      .array(z.string().regex(/^[A-Z_]+$/))
      .max(40)
      .default([]),
    /** Size of /dev/shm in MiB. */
    shmSizeMiB: z
      .number()
      .int()
      .positive()
      .max(1024 * 1024)
      .optional(),
    /** Host directories mounted read-only (`{hostPath, path}`), e.g. a cache of agent binaries. */
    readOnlyBinds: z
      .array(z.object({ hostPath: z.string().startsWith('/'), path: z.string().startsWith('/') }).strict())
      .max(16)
      .default([]),
  })
  .strict();

/** The gateway as an agent inside a Docker sandbox reaches it: its own loopback, the relay's port. */
function gatewayUrl(port: number): string {
  return `http://127.0.0.1:${port}`;
}

/** The port of a URL `gatewayUrl` made before a restart. */
function recordedGatewayPort(url: string): number {
  const match = /^http:\/\/127\.0\.0\.1:(\d{1,5})$/.exec(url);
  const port = Number(match?.[1]);
  if (match === null || port < 1 || port > 65535) {
    throw new GymError(
      'PROVIDER_ERROR',
      `cannot restore gateway reach at ${url}: not a URL this provider gives`,
      {
        details: { url },
      },
    );
  }
  return port;
}

/** The one scope of a Docker backend: its sandboxes carry none, all are hidden when it does not answer. */
const ENGINE_SCOPE = 'engine';

function containerState(state: string | undefined): SandboxState {
  switch (state) {
    case 'created':
      return 'creating';
    case 'running':
      return 'ready';
    case 'removing':
      return 'destroying';
    default:
      return 'failed';
  }
}

export class DockerProvider implements SandboxProvider {
  readonly name = 'docker';
  readonly capabilities: ProviderCapabilities;
  readonly #docker: Docker;
  readonly #context: ProviderContext;
  readonly #options: z.output<typeof DockerProviderOptionsSchema>;
  /** Sessions by sandbox id, then by session name and user. */
  readonly #sessions = new Map<string, Map<string, Promise<ShellSession>>>();
  /** The gateway relays started by exposeGateway. */
  readonly #relays: GatewayRelays;
  /** Last OOM-kill count seen per sandbox; a fresh container starts at 0. */
  readonly #oomCounts = new OomKillCounts();
  /** What specs may take from the host (binds, capabilities, network, snapshot tags). */
  readonly #hostAccess: HostAccessPolicy;
  /** Per-exec cgroups for timeouts, and stopping a sandbox's processes, from the host. */
  readonly #processes: ProcessControl;
  /** Images from root filesystems and derived images (`prepareImage` and its kin). */
  readonly #images: DockerImages;
  /** Verifier toolchains compared with their images, from the engine's side. */
  readonly #toolchain: DockerToolchainCheck;
  readonly #imageSources: ImageSources;
  /** Sandboxes this provider is destroying: their end is never a command's doing. */
  readonly #destroying = new Set<string>();
  /** What the configured OCI runtime changes (gVisor: see `runtime-tier.ts`). */
  readonly #tier: RuntimeTier;
  /** Which engine answers (Docker or Podman) and what its creates need. */
  readonly #engine: EngineTraits;

  constructor(docker: Docker, context: ProviderContext, options: DockerProviderOptions = {}) {
    this.#docker = docker;
    this.#context = context;
    this.#options = parseOrThrow(DockerProviderOptionsSchema, options, 'docker provider options');
    this.#images = new DockerImages(docker, context.logger, this.#options.buildResources, context.clock);
    this.#toolchain = new DockerToolchainCheck(docker, context.clock);
    this.#tier = runtimeTier(this.#options.runtime);
    this.#engine = new EngineTraits(docker);
    this.#imageSources = new ImageSources(docker, this.#options.imageSources, context.logger);
    this.#relays = new GatewayRelays({
      maxConnections: this.#options.relayMaxConnections,
      idleTimeoutMs: this.#options.relayIdleTimeoutMs,
      logger: context.logger,
    });
    if (!/^[a-z0-9][a-z0-9-]{0,30}$/.test(context.namespace)) {
      throw new GymError(
        'VALIDATION_FAILED',
        `namespace "${context.namespace}" must be 1-31 characters of a-z, 0-9 or "-"`,
      );
    }
    const engineSocket = (docker.modem as { socketPath?: unknown } | undefined)?.socketPath;
    this.#hostAccess = new HostAccessPolicy(
      this.#options,
      typeof engineSocket === 'string' ? engineSocket : this.#options.socketPath,
    );
    this.#processes = new ProcessControl(
      detectHostControl({
        helperPath: this.#options.execHelperPath,
        // dockerode keeps a function that finds the default unix socket when none was given.
        isEngineLocal: typeof engineSocket === 'string' || typeof engineSocket === 'function',
      }),
      context.logger,
    );
    // Under gVisor the helper is still the keeper, but the host cannot see the guest's processes.
    const hasHostControl = this.#processes.host.mode === 'cgroup' && this.#tier.hostControlGap === undefined;
    // There the keeper stops them from inside (`stopGuestProcesses`), which needs only the helper.
    const canStopInGuest = this.#processes.helperBind !== null && this.#tier.hasGuestKernel;
    this.capabilities = {
      sessions: true,
      snapshot: true,
      gpus: this.#options.gpus,
      diskLimit: this.#options.diskQuota,
      // What the engine has; which of them specs may use is the operator's (allowedNetworkModes,
      // checked at create as FORBIDDEN_BY_CONFIG).
      networkModes: [...NetworkModeSchema.options],
      gatewayReach: this.#options.gatewayReach && !this.#tier.hasGuestKernel,
      timeoutKill: hasHostControl ? 'cgroup' : 'tagged',
      stopProcesses: hasHostControl || canStopInGuest,
      ...(this.#tier.hasGuestKernel ? { limitOverrun: 'sandbox' as const } : {}),
      // The engine's change list and archive reads need nothing on the host but the engine.
      toolchainCheck: true,
      imageFormats: ['rootfs', 'derived', 'plan'],
    };
  }

  /**
   * Creates the container; an image missing from the engine is first fetched from the configured
   * image sources (once), else it is IMAGE_NOT_FOUND naming where it was looked for.
   */
  async #createContainer(image: string, options: Docker.ContainerCreateOptions): Promise<Docker.Container> {
    try {
      return await this.#docker.createContainer(options);
    } catch (error) {
      const wrapped = wrapDockerError(error, { operation: 'create', image });
      if (wrapped.code !== 'IMAGE_NOT_FOUND' || !this.#imageSources.isConfigured) throw wrapped;
      if (!(await this.#imageSources.fetch(image)))
        throw new GymError(
          'IMAGE_NOT_FOUND',
          `${wrapped.message}; the configured image sources have none: ${this.#imageSources.describe(image)}`,
          {
            details: { ...wrapped.details, image, imageSources: this.#imageSources.describe(image) },
            cause: error,
          },
        );
    }
    return this.#docker.createContainer(options);
  }

  /** Container names embed the namespace, so a lookup by name never crosses deployments. */
  containerName(id: string): string {
    return `gym-${this.#context.namespace}-${id}`;
  }

  /**
   * Removes image-build containers that a daemon which died left past their deadline (see
   * `DockerImages.sweepLeftovers`); what the daemon's start runs. Never throws: an engine that does
   * not answer is logged, and the next start tries again.
   */
  async sweepBuildLeftovers(): Promise<void> {
    try {
      const removed = await this.#images.sweepLeftovers();
      if (removed > 0)
        this.#context.logger.info({ removed }, 'removed image-build containers left past their deadline');
    } catch (error) {
      this.#context.logger.warn({ error: String(error) }, 'could not sweep image-build containers');
    }
  }

  async health(): Promise<ProviderHealth> {
    try {
      const version = await this.#docker.version();
      const engine = await this.#engine.kind();
      const gap = this.#hostControlGap();
      // A runtime the engine lacks, or gVisor without the arguments it needs here, fails every create.
      const runtimeProblems =
        this.#options.runtime === undefined
          ? []
          : await checkEngineRuntime(this.#docker, this.#options.runtime);
      return {
        ok: runtimeProblems.length === 0,
        message:
          `${engine === 'podman' ? 'Podman' : 'Docker'} engine ${version.Version} (API ${version.ApiVersion}), runtime ${this.#tier.runtime}` +
          (runtimeProblems.length > 0 ? `: ${runtimeProblems.join('; ')}` : '') +
          (gap === undefined
            ? '; timed-out commands are killed through their cgroup'
            : `; timed-out commands are killed from inside the sandbox only, a weaker guarantee (${gap})`),
        details: {
          version: version.Version,
          engine,
          runtime: this.#tier.runtime,
          timeoutKill: this.capabilities.timeoutKill,
          ...(gap === undefined ? {} : { timeoutKillReason: gap }),
          ...(runtimeProblems.length === 0 ? {} : { runtimeProblems }),
        },
      };
    } catch (error) {
      return { ok: false, message: wrapDockerError(error, { operation: 'ping' }).message };
    }
  }

  /** Why commands cannot be confined and stopped from the host; undefined when they can. */
  #hostControlGap(): string | undefined {
    return (
      this.#tier.hostControlGap ??
      (this.#processes.host.mode === 'tagged' ? this.#processes.host.reason : undefined)
    );
  }

  #checkCapabilities(spec: SandboxSpec): void {
    const unsupported = (what: string, hint: string) =>
      new GymError('CAPABILITY_UNSUPPORTED', `the docker provider is not configured for ${what}: ${hint}`, {
        details: { provider: this.name, capability: what },
      });
    if (spec.resources.gpus !== undefined && spec.resources.gpus > 0 && !this.capabilities.gpus) {
      throw unsupported('gpus', 'set `gpus: true` in its options on an engine with the NVIDIA runtime');
    }
    if (spec.resources.diskMiB !== undefined && !this.capabilities.diskLimit) {
      throw unsupported(
        'diskMiB',
        'disk limits need overlay2 on xfs with pquota; then set `diskQuota: true`',
      );
    }
  }

  async create(spec: SandboxSpec, options: CreateOptions = {}): Promise<SandboxInfo> {
    this.#checkCapabilities(spec);
    const specOptions = parseOrThrow(
      DockerSpecOptionsSchema,
      spec.providerOptions,
      'providerOptions for docker',
    );
    this.#hostAccess.checkNetwork(spec.network);
    this.#hostAccess.checkCapabilities(specOptions.capAdd, DEFAULT_CAPABILITIES);
    const binds = await this.#hostAccess.resolveBinds(specOptions.readOnlyBinds);
    const id = options.id ?? createId('sbx');
    const createdAtMs = this.#context.clock.now();
    const deadlineAtMs = createdAtMs + this.#context.maxLifetimeSeconds * 1000;
    const leaseExpiresAtMs = Math.min(createdAtMs + spec.ttlSeconds * 1000, deadlineAtMs);
    const pool = options.pool ?? null;
    const labels = encodeLabels(
      DOCKER_LABEL_PREFIX,
      {
        namespace: this.#context.namespace,
        daemonId: this.#context.daemonId,
        sandboxId: id,
        pool,
        createdAtMs,
        leaseExpiresAtMs,
        deadlineAtMs,
      },
      spec.labels,
    );
    labels[USER_KEYS_LABEL] = Object.keys(spec.labels).sort().join(',');
    const { resources } = spec;

    let container: Docker.Container;
    try {
      container = await this.#createContainer(spec.image, {
        name: this.containerName(id),
        Image: spec.image,
        // With the exec helper mounted, PID 1 is the helper's keeper: it runs nothing of the
        // sandbox's own (a shell loop would run the sandbox's `sleep`, which an agent can replace
        // to be respawned after every stop), cannot be killed from inside, and reaps orphans.
        Entrypoint:
          this.#processes.helperBind === null ? ['sh', '-c', IDLE_SCRIPT] : [EXEC_HELPER_MOUNT, '--keeper'],
        Cmd: [],
        Env: Object.entries(spec.env).map(([name, value]) => `${name}=${value}`),
        Labels: labels,
        ...(spec.workdir === undefined ? {} : { WorkingDir: spec.workdir }),
        ...(spec.user === undefined ? {} : { User: spec.user }),
        HostConfig: {
          Init: this.#processes.helperBind === null ? this.#options.init : false,
          // runc's; another runtime (gVisor) is left its own defaults.
          ...(this.#options.runtime === undefined ? { ReadonlyPaths: SANDBOX_READONLY_PATHS } : {}),
          NetworkMode: spec.network,
          CapDrop: ['ALL'],
          CapAdd: [...new Set([...DEFAULT_CAPABILITIES, ...specOptions.capAdd])],
          SecurityOpt: ['no-new-privileges'],
          LogConfig: { Type: 'none', Config: {} },
          ...(resources.memoryMiB === undefined
            ? {}
            : {
                Memory: (resources.memoryMiB + this.#tier.memoryOverheadMiB) * 1024 * 1024,
                MemorySwap: (resources.memoryMiB + this.#tier.memoryOverheadMiB) * 1024 * 1024,
              }),
          ...(resources.cpus === undefined ? {} : { NanoCpus: Math.round(resources.cpus * 1e9) }),
          // Under gVisor the host's counts include its kernel's own threads and memory.
          ...(resources.pidsLimit === undefined
            ? {}
            : { PidsLimit: resources.pidsLimit + this.#tier.pidsOverhead }),
          ...(resources.diskMiB === undefined ? {} : { StorageOpt: { size: `${resources.diskMiB}M` } }),
          ...(specOptions.shmSizeMiB === undefined ? {} : { ShmSize: specOptions.shmSizeMiB * 1024 * 1024 }),
          ...(binds.length === 0 && this.#processes.helperBind === null
            ? {}
            : {
                Binds: [
                  ...binds.map((bind) => `${bind.hostPath}:${bind.path}:ro`),
                  ...(this.#processes.helperBind === null ? [] : [this.#processes.helperBind]),
                ],
              }),
          ...(resources.gpus === undefined || resources.gpus === 0
            ? {}
            : { DeviceRequests: [{ Driver: 'nvidia', Count: resources.gpus, Capabilities: [['gpu']] }] }),
          ...(this.#options.runtime === undefined ? {} : { Runtime: this.#options.runtime }),
          ...(await this.#engine.hostConfig()),
          // gVisor mounts a tmpfs of its own on an empty /tmp, where no archive upload reaches.
          ...(this.#tier.hasGuestKernel
            ? { Mounts: [{ Type: 'volume' as const, Source: '', Target: '/tmp' }] }
            : {}),
        },
      });
    } catch (error) {
      throw wrapDockerError(error, { operation: 'create', image: spec.image });
    }

    try {
      await container.start();
      this.#oomCounts.start(id);
      if (this.#processes.helperBind !== null) this.#processes.created(id, container.id);
      if (spec.files.length > 0) await this.#writeSeedFiles(container, spec);
      if (spec.readiness !== undefined)
        await waitUntilReady(spec.readiness, (request) => this.exec(id, request));
    } catch (error) {
      await this.#removeContainer(container).catch((removeError: unknown) =>
        this.#context.logger.warn(
          { sandboxId: id, error: String(removeError) },
          'could not remove a sandbox whose create failed',
        ),
      );
      this.#oomCounts.forget(id);
      const cause = wrapDockerError(error, { operation: 'start', sandboxId: id });
      throw new GymError(
        'SANDBOX_START_FAILED',
        `sandbox ${id} failed to start and was removed: ${cause.message}`,
        {
          details: { sandboxId: id, image: spec.image, reason: cause.message },
          cause,
        },
      );
    }
    this.#context.logger.debug({ sandboxId: id, image: spec.image }, 'sandbox created');
    return {
      id,
      provider: this.name,
      state: 'ready',
      image: spec.image,
      labels: { ...spec.labels },
      namespace: this.#context.namespace,
      daemonId: this.#context.daemonId,
      pool,
      createdAt: new Date(createdAtMs).toISOString(),
      leaseExpiresAt: new Date(leaseExpiresAtMs).toISOString(),
      deadlineAt: new Date(deadlineAtMs).toISOString(),
      providerRef: container.id,
    };
  }

  async #writeSeedFiles(container: Docker.Container, spec: SandboxSpec): Promise<void> {
    for (const file of spec.files) {
      const content = Buffer.from(file.content, file.encoding === 'base64' ? 'base64' : 'utf8');
      await container.putArchive(packSingleFile(file.path.slice(1), content, file.mode), { path: '/' });
    }
  }

  /**
   * `image` is the container's own record of it (inspect's `Config.Image`, list's `Image`), not
   * a label: labels hold identity only. (Containers of older daemons also carry a `gym.image`
   * label; nothing reads it.) A listing shows the image id instead of the reference when that
   * reference has since been moved to another image.
   */
  #toInfo(
    labels: Record<string, string>,
    state: string | undefined,
    image: string,
    ref: string,
  ): SandboxInfo | null {
    const decoded = decodeLabels(DOCKER_LABEL_PREFIX, labels);
    if (decoded === null || decoded.namespace !== this.#context.namespace) return null;
    const ownKeys = labels[USER_KEYS_LABEL]?.split(',');
    return {
      ...decoded,
      labels:
        ownKeys === undefined
          ? decoded.labels
          : Object.fromEntries(Object.entries(decoded.labels).filter(([key]) => ownKeys.includes(key))),
      provider: this.name,
      state: containerState(state),
      image,
      providerRef: ref,
    };
  }

  async get(id: string): Promise<SandboxInfo> {
    let inspected: Docker.ContainerInspectInfo;
    try {
      inspected = await this.#docker.getContainer(this.containerName(id)).inspect();
    } catch (error) {
      throw wrapDockerError(error, { operation: 'inspect', sandboxId: id });
    }
    const info = this.#toInfo(
      inspected.Config.Labels ?? {},
      inspected.State.Status,
      inspected.Config.Image,
      inspected.Id,
    );
    if (info === null || info.id !== id)
      throw new GymError('SANDBOX_NOT_FOUND', `sandbox ${id} does not exist`);
    return info;
  }

  /** One listing call: the engine answers whole or not at all, and then it is the one unreachable scope. */
  async list(filter: ListFilter = {}): Promise<SandboxListing> {
    const labelFilters = Object.entries(
      selectorLabels(DOCKER_LABEL_PREFIX, this.#context.namespace, filter),
    ).map(([key, value]) => `${key}=${value}`);
    let containers: Docker.ContainerInfo[];
    try {
      containers = await this.#docker.listContainers({ all: true, filters: { label: labelFilters } });
    } catch (error) {
      const reason = wrapDockerError(error, { operation: 'list' }).message;
      return { sandboxes: [], unreachable: [{ scope: ENGINE_SCOPE, reason }] };
    }
    const isPodman = (await this.#engine.kind().catch(() => 'docker')) === 'podman';
    // The engine also matches labels a container inherited from its image (see USER_KEYS_LABEL):
    // a container of a sandbox's snapshot (a build's, a user's `docker run`) carries that
    // sandbox's identity labels. Only the container of the sandbox's own name is the sandbox.
    const sandboxes = containers
      .flatMap((container) => {
        // Podman lists a short name it resolved locally as `localhost/<name>`.
        const image = isPodman ? container.Image.replace(/^localhost\//, '') : container.Image;
        const info = this.#toInfo(container.Labels, container.State, image, container.Id);
        return info !== null && (container.Names ?? []).includes(`/${this.containerName(info.id)}`)
          ? info
          : [];
      })
      // Podman's engine joins several label filters with "or": each is checked again here.
      .filter((info) => matchesListFilter(info, filter));
    return { sandboxes, unreachable: [] };
  }

  /**
   * After an abnormal end, one probe exec both proves the sandbox alive (an exec into a dead or
   * dying container fails) and reads its OOM-kill counter. Inspecting the container instead races
   * with a destroy: the engine reports "running" until its kill has finished.
   */
  #hooks(id: string, container: Docker.Container): ExecHooks {
    const noHooks: ExecHooks = { classifyAbnormalEnd: async () => 'sandbox_gone' };
    return {
      classifyAbnormalEnd: () =>
        classifyAbnormalEnd(id, this.#oomCounts, {
          // From the host when it can: the probe runs the sandbox's own `sh`, and an agent that
          // deleted it would make every kill look like a sandbox gone (an infra error).
          outsideView: () => this.#processes.hostView(container),
          lossCause: () => this.#lossCause(id, container),
          // The engine answers "cannot exec in a stopped state" (or exit 126) for a sandbox gone.
          probe: () =>
            runOneShotExec(
              container,
              {
                command: OOM_COUNTER_COMMAND,
                env: {},
                stdinEncoding: 'utf8',
                timeoutMs: 10_000,
                maxOutputBytes: 4096,
                user: '0',
              },
              {},
              noHooks,
            ),
        }),
    };
  }

  /**
   * Whether a container seen dead died of what ran in it, by the engine's record of how its first
   * process (the keeper) ended, once the engine has recorded it. Taken away from outside (null):
   * removed or being removed, by this daemon or another; stopped (the keeper ends, 0, only on a
   * signal from outside its pid namespace: `docker stop`, an engine shutting down); killed from
   * outside without an OOM. The agent's doing: the OOM killer took the keeper (the engine saw an
   * OOM kill and the keeper ended by SIGKILL, which nothing inside the sandbox can send PID 1); or,
   * in a container whose keeper is tini and a shell loop (no exec helper), the loop ended by
   * anything but a stop.
   */
  async #lossCause(id: string, container: Docker.Container): Promise<SandboxLoss | null> {
    const deadline = performance.now() + EXIT_RECORD_WAIT_MS;
    for (;;) {
      if (this.#destroying.has(id)) return null;
      let inspected: Docker.ContainerInspectInfo;
      try {
        inspected = await container.inspect();
      } catch {
        return null;
      }
      const { State: state } = inspected;
      if (state.Status === 'removing' || state.Status === 'dead') return null;
      if (!state.Running) {
        if (state.OOMKilled && state.ExitCode === SIGKILL_EXIT_CODE)
          return { lost: 'oom', reason: KEEPER_OOM_REASON };
        // gVisor's kernel ended with no kill by the engine: the sandbox's own use of its limits
        // (SIGKILL: the host's OOM killer; otherwise it could not make the threads it needed).
        if (
          this.#tier.hasGuestKernel &&
          state.ExitCode !== 0 &&
          !(await engineKilled(this.#docker, inspected.Id, new Date(state.StartedAt)).catch(() => true))
        )
          return state.ExitCode === SIGKILL_EXIT_CODE
            ? { lost: 'oom', reason: GVISOR_OOM_REASON }
            : { lost: 'killed', reason: `${GVISOR_LIMIT_REASON} (exit ${state.ExitCode})` };
        const isHelperKeeper = inspected.Config.Entrypoint?.[0] === EXEC_HELPER_MOUNT;
        if (!isHelperKeeper && state.ExitCode !== 0 && state.ExitCode !== 143)
          return {
            lost: 'killed',
            reason: `the sandbox's first process (its keeper) ended with code ${state.ExitCode}, killed from inside, so the sandbox died`,
          };
        return null;
      }
      if (performance.now() > deadline) return null;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }

  async exec(id: string, request: ExecRequest, options: ExecOptions = {}): Promise<ExecResult> {
    // Under gVisor an exec's stream outlives its sandbox: the sandbox's end is watched instead.
    if (this.#tier.hasGuestKernel)
      return watchSandboxEnd(this.#docker.getContainer(this.containerName(id)), options, (watched) =>
        this.#exec(id, request, watched),
      ).then((ended) => (ended === 'ended' ? this.#endedUnder(id, request) : ended));
    return this.#exec(id, request, options);
  }

  /** The result of a command whose gVisor sandbox ended under it: why it ended, read from the engine. */
  async #endedUnder(id: string, request: ExecRequest): Promise<ExecResult> {
    const loss = await this.#lossCause(id, this.#docker.getContainer(this.containerName(id)));
    const output = new ExecOutput(request);
    return loss === null ? output.result('sandbox_gone', null) : output.lost(loss.lost, loss.reason);
  }

  async #exec(id: string, request: ExecRequest, options: ExecOptions): Promise<ExecResult> {
    const container = this.#docker.getContainer(this.containerName(id));
    const hooks = this.#hooks(id, container);
    try {
      if (request.session !== undefined) {
        const session = await this.#session(id, container, request.session, request.user);
        return await this.#confirmAlive(id, container, await session.run(request, options, hooks));
      }
      const confinement =
        this.#tier.hostControlGap === undefined ? await this.#processes.confinement(id, container) : null;
      const result = await runOneShotExec(container, this.#launched(request), options, hooks, confinement);
      // Podman's exit for a command its runtime could not start is 125, Docker's 126.
      if (result.status === 'ok' && result.exitCode === 125 && (await this.#engine.kind()) === 'podman')
        return { ...result, exitCode: 126 };
      return await this.#confirmAlive(id, container, result);
    } catch (error) {
      if (error instanceof SessionNotStarted) {
        const output = new ExecOutput(request, options);
        output.push('stdout', Buffer.from(error.output));
        output.push('stderr', notStartedNote(error.exitCode));
        return output.result('ok', error.exitCode);
      }
      const wrapped = wrapDockerError(error, { operation: 'exec', sandboxId: id });
      // Podman refuses at the exec's create what Docker reports as the exec's exit 126.
      if (/unable to find user/i.test(wrapped.message)) return cannotStartResult(wrapped.message);
      // A container that exists but is not running (it died) is a result, not an error.
      if (wrapped.code === 'SANDBOX_NOT_READY') {
        const end = await hooks.classifyAbnormalEnd();
        if (end === 'sandbox_gone' || typeof end === 'object')
          return abnormalEndResult(new ExecOutput(request), end, null);
      }
      throw wrapped;
    }
  }

  /**
   * Under gVisor a one-shot command starts through the exec helper's `--exec` (see gym-exec.c):
   * its runtime would give the command's first process the container's capabilities whatever its
   * user, and run it in `/` when the working directory is a file.
   */
  #launched(request: ExecRequest): ExecRequest {
    if (!this.#tier.hasGuestKernel || this.#processes.helperBind === null) return request;
    const { command: _command, ...rest } = request;
    return {
      ...rest,
      argv: [
        EXEC_HELPER_MOUNT,
        '--exec',
        request.cwd ?? '',
        ...(request.argv ?? ['sh', '-c', request.command!]),
      ],
    };
  }

  /**
   * An exit code that the runtime also gives when it could not start the command or killed it
   * (126, 137) is checked against the container itself: when it is gone, the result is
   * `sandbox_gone`, never output a harness or verifier would take for the command's own. (A
   * container removed as an exec starts answers "OCI runtime exec failed", 126.)
   */
  async #confirmAlive(id: string, container: Docker.Container, result: ExecResult): Promise<ExecResult> {
    if (result.status !== 'ok' || !RUNTIME_EXIT_CODES.has(result.exitCode ?? 0)) return result;
    const isAlive = await this.get(id).then(
      (info) => info.state === 'ready',
      (error: unknown) => !(error instanceof GymError && error.code === 'SANDBOX_NOT_FOUND'),
    );
    if (isAlive) return result;
    const loss = await this.#lossCause(id, container);
    return loss === null
      ? { ...result, status: 'sandbox_gone', exitCode: null }
      : markSandboxLost(result, loss.lost, loss.reason);
  }

  async #session(
    id: string,
    container: Docker.Container,
    name: string,
    user: string | undefined,
  ): Promise<ShellSession> {
    let byName = this.#sessions.get(id);
    if (byName === undefined) {
      byName = new Map();
      this.#sessions.set(id, byName);
    }
    const key = `${name}\0${user ?? ''}`;
    const existing = byName.get(key);
    if (existing !== undefined) {
      const session = await existing.catch(() => null);
      if (session?.isAlive) return session;
    }
    // Only opening a session looks up the confinement: the per-command path stays as fast as it was.
    const opening = (
      this.#tier.hostControlGap === undefined
        ? this.#processes.confinement(id, container)
        : Promise.resolve(null)
    ).then((confinement) =>
      openDockerSession(container, user, confinement, { pipes: this.#options.sessionPipes }),
    );
    byName.set(key, opening);
    opening.catch(() => byName.delete(key));
    return opening;
  }

  #closeSessions(id: string): void {
    const byName = this.#sessions.get(id);
    this.#sessions.delete(id);
    for (const opening of byName?.values() ?? []) opening.then((session) => session.close()).catch(() => {});
  }

  async writeFile(
    id: string,
    path: string,
    content: FileContent,
    options: WriteFileOptions = {},
  ): Promise<void> {
    const container = this.#docker.getContainer(this.containerName(id));
    const normalized = posix.normalize(path);
    if (normalized === '/') throw new GymError('PATH_KIND_MISMATCH', 'cannot write a file at /');
    await refuseLinkedDirectories(container, id, [posix.dirname(normalized)]);
    try {
      // Extracting at / with the full relative name creates missing parent directories.
      await container.putArchive(packSingleFile(normalized.slice(1), content, options.mode ?? 0o644), {
        path: '/',
      });
    } catch (error) {
      const wrapped = wrapDockerError(error, { operation: 'write file', sandboxId: id });
      if (
        wrapped.code === 'PROVIDER_ERROR' &&
        /directory|not a dir|cannot overwrite/i.test(wrapped.message)
      ) {
        throw new GymError('PATH_KIND_MISMATCH', `cannot write file ${path}: ${wrapped.message}`, {
          cause: wrapped,
        });
      }
      throw wrapped;
    }
  }

  async #getArchive(id: string, path: string): Promise<Readable> {
    const container = this.#docker.getContainer(this.containerName(id));
    try {
      return (await container.getArchive({ path })) as unknown as Readable;
    } catch (error) {
      const wrapped = wrapDockerError(error, { operation: 'read', sandboxId: id });
      if (
        wrapped.code === 'SANDBOX_NOT_FOUND' &&
        /path|file|directory/i.test(wrapped.details.engineMessage as string)
      ) {
        throw new GymError('FILE_NOT_FOUND', `${path} does not exist in sandbox ${id}`, {
          details: { sandboxId: id, path },
        });
      }
      throw wrapped;
    }
  }

  async readFile(id: string, path: string): Promise<Readable> {
    return readFileThroughLinks(path, (current) => this.#getArchive(id, current));
  }

  async writeArchive(id: string, directory: string, archive: Readable): Promise<void> {
    const container = this.#docker.getContainer(this.containerName(id));
    // Check the sandbox first, so an upload to a missing one does not spool for nothing.
    await this.get(id);
    const spooled = await spoolSafeArchive(archive, directory);
    try {
      await refuseLinkedDirectories(container, id, spooled.directories);
      await container.putArchive(spooled.open(), { path: '/' });
    } catch (error) {
      throw wrapDockerError(error, { operation: 'write archive', sandboxId: id });
    } finally {
      await spooled.dispose();
    }
  }

  async readArchive(id: string, directory: string): Promise<Readable> {
    return rebaseArchive(await this.#getArchive(id, posix.normalize(directory)));
  }

  /**
   * Relays `http://127.0.0.1:<port>` inside the sandbox to the gateway socket: on any free port
   * the first time, on the recorded URL's port after a restart. The sandbox has a network
   * namespace of its own, so its port collides with no other sandbox's.
   */
  async exposeGateway(id: string, options: { socketPath: string; url?: string }): Promise<{ url: string }> {
    if (!this.capabilities.gatewayReach) {
      const why = this.#tier.hasGuestKernel
        ? `runtime ${this.#tier.runtime} runs its own network stack, which the relay on the sandbox's host loopback does not reach`
        : 'it is off in the options';
      throw new GymError(
        'CAPABILITY_UNSUPPORTED',
        `gatewayReach is not offered by this docker provider: ${why}`,
        {
          details: { provider: this.name, capability: 'gatewayReach', runtime: this.#tier.runtime },
        },
      );
    }
    const open = this.#relays.portOf(id);
    if (open !== undefined) return { url: gatewayUrl(await open) };
    const port = options.url === undefined ? 0 : recordedGatewayPort(options.url);
    let pid: number;
    try {
      pid = (await this.#docker.getContainer(this.containerName(id)).inspect()).State.Pid;
    } catch (error) {
      throw wrapDockerError(error, { operation: 'expose gateway', sandboxId: id });
    }
    if (!pid) throw new GymError('SANDBOX_NOT_READY', `sandbox ${id} is not running`);
    // The listener lives in the sandbox's network namespace (its loopback only); the daemon
    // reaches the host's socket through the filesystem, which no network namespace fences.
    return { url: gatewayUrl(await this.#relays.open(id, pid, port, options.socketPath)) };
  }

  /** What the gateway relays hold (listeners, open and refused connections), for metrics. */
  relayStats(): RelayStats {
    return this.#relays.stats();
  }

  async destroy(id: string): Promise<void> {
    this.#closeSessions(id);
    this.#relays.close(id);
    this.#oomCounts.forget(id);
    this.#processes.forget(id);
    this.#destroying.add(id);
    try {
      await this.#removeContainer(this.#docker.getContainer(this.containerName(id)));
    } catch (error) {
      throw wrapDockerError(error, { operation: 'destroy', sandboxId: id });
    } finally {
      // Commands that ended with the container have looked already: nothing runs in it now.
      setTimeout(() => this.#destroying.delete(id), EXIT_RECORD_WAIT_MS).unref();
    }
  }

  /**
   * Kills every process in the sandbox but its init and idle keeper (the container stays up), and
   * drops its sessions, whose shells die with the rest.
   */
  async stopProcesses(id: string): Promise<{ killed: number }> {
    if (!this.capabilities.stopProcesses) {
      throw new GymError(
        'CAPABILITY_UNSUPPORTED',
        'this docker provider cannot stop processes from the host',
        {
          details: {
            provider: this.name,
            capability: 'stopProcesses',
            runtime: this.#tier.runtime,
            ...(this.#hostControlGap() === undefined ? {} : { reason: this.#hostControlGap() }),
          },
        },
      );
    }
    const container = this.#docker.getContainer(this.containerName(id));
    this.#closeSessions(id);
    try {
      if (this.#tier.hasGuestKernel)
        return { killed: await stopGuestProcesses(container, EXEC_HELPER_MOUNT) };
      return { killed: await this.#processes.stopProcesses(id, container) };
    } catch (error) {
      if (error instanceof Error && !('statusCode' in error)) {
        throw new GymError(
          'PROVIDER_ERROR',
          `could not stop the processes of sandbox ${id}: ${error.message}`,
          {
            details: { sandboxId: id },
            cause: error,
          },
        );
      }
      throw wrapDockerError(error, { operation: 'stop processes', sandboxId: id });
    }
  }

  /** The toolchain check through the engine alone (see `toolchain-view.ts`); nothing runs in the container. */
  checkToolchain(id: string, request: ToolchainCheckRequest): Promise<ToolchainCheckResult> {
    return this.#toolchain.check(
      this.#docker.getContainer(this.containerName(id)),
      id,
      request.tools,
      request.workdirs,
    );
  }

  async #removeContainer(container: Docker.Container): Promise<void> {
    try {
      await container.remove({ force: true, v: true });
    } catch (error) {
      const status = (error as { statusCode?: number }).statusCode;
      // 404: already gone. 409: a removal is already in progress. Both mean "destroyed" to the caller.
      if (status === 404 || status === 409) return;
      throw error;
    }
  }

  async snapshot(id: string, options: { image: string }): Promise<{ image: string }> {
    const separator = options.image.lastIndexOf(':');
    const hasTag = separator > options.image.lastIndexOf('/');
    const repo = hasTag ? options.image.slice(0, separator) : options.image;
    const tag = hasTag ? options.image.slice(separator + 1) : 'latest';
    let existing: Docker.ImageInspectInfo | null = null;
    try {
      existing = await this.#docker.getImage(`${repo}:${tag}`).inspect();
    } catch (error) {
      if ((error as { statusCode?: number }).statusCode !== 404)
        throw wrapDockerError(error, { operation: 'snapshot', sandboxId: id });
    }
    // A committed container keeps its labels, so a snapshot carries our sandbox-id label.
    const isSnapshot =
      existing?.Config?.Labels?.[DOCKER_LABEL_PREFIX + SYSTEM_LABELS.sandboxId] !== undefined;
    this.#hostAccess.checkSnapshotTarget(`${repo}:${tag}`, existing === null ? null : { isSnapshot });
    try {
      await this.#docker.getContainer(this.containerName(id)).commit({ repo, tag, pause: true });
    } catch (error) {
      throw wrapDockerError(error, { operation: 'snapshot', sandboxId: id });
    }
    return { image: `${repo}:${tag}` };
  }

  prepareImage(source: ImageSource): Promise<void> {
    return this.#images.prepare(source);
  }

  inspectImage(reference: string): Promise<ImageInfo | null> {
    return this.#images.inspect(reference);
  }

  listImages(filter?: ImageFilter): Promise<ImageInfo[]> {
    return this.#images.list(filter);
  }

  async close(): Promise<void> {
    for (const id of [...this.#sessions.keys()]) this.#closeSessions(id);
    this.#relays.closeAll();
  }
}
