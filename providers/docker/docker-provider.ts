import { join } from 'node:path';
import type { Readable } from 'node:stream';
import type Docker from 'dockerode';
import type { z } from 'zod';
import { GymError } from '../../core/errors.ts';
import type { ExecRequest, ExecResult } from '../../core/schemas/exec.ts';
import type { SandboxInfo, SandboxSpec } from '../../core/schemas/sandbox.ts';
import type { ToolchainCheckRequest, ToolchainCheckResult } from '../../core/schemas/toolchain.ts';
import { parseOrThrow } from '../../core/validate.ts';
import {
  type CreateOptions,
  type ExecOptions,
  type FileContent,
  type ImageFilter,
  type ImageInfo,
  type ImageSource,
  type ListFilter,
  PROVIDER_SPECIFICATION_VERSION,
  type ProviderCapabilities,
  type ProviderContext,
  type ProviderHealth,
  type RelayStats,
  type SandboxListing,
  type SandboxProvider,
  type SnapshotOptions,
  type SnapshotResult,
  type WriteFileOptions,
} from '../sandbox-provider.ts';
import { abnormalEndResult, OomKillCounts } from '../shared/abnormal-end.ts';
import { cannotStartResult, ExecOutput } from '../shared/exec-output.ts';
import { encodeLabels } from '../shared/labels.ts';
import type { PortRelay } from '../shared/port-relay.ts';
import type { PtyChannel, PtyOpenOptions, PtyOpenRequest } from '../shared/pty-channel.ts';
import { waitUntilReady } from '../shared/readiness.ts';
import { sandboxIdentity } from '../shared/sandbox-identity.ts';
import { SessionTable } from '../shared/session-table.ts';
import type { ShellSession } from '../shared/shell-session.ts';
import { requireSpecCapabilities } from '../shared/spec-capabilities.ts';
import { dockerCapabilities, gatewayReachUnsupported, stopProcessesUnsupported } from './capabilities.ts';
import { sandboxContainerOptions } from './container-config.ts';
import { ContainerListing, DOCKER_LABEL_PREFIX, USER_KEYS_LABEL } from './container-listing.ts';
import { wrapDockerError, wrapStopError } from './docker-errors.ts';
import { ContainerFiles, writeSeedFiles } from './docker-files.ts';
import { DockerImages } from './docker-images.ts';
import { openDockerPty } from './docker-pty.ts';
import { openDockerSession, SessionNotStarted } from './docker-session.ts';
import { engineHealth } from './engine-health.ts';
import { EngineTraits } from './engine-kind.ts';
import { GatewayRelays } from './gateway-relay.ts';
import { HostAccessPolicy } from './host-access.ts';
import { ImageSources } from './image-sources.ts';
import { LiveForks } from './live-fork.ts';
import { LossCheck } from './loss-check.ts';
import { EXEC_HELPER_MOUNT, notStartedNote, runOneShotExec } from './one-shot-exec.ts';
import { DEFAULT_CAPABILITIES, type DockerProviderOptions, DockerProviderOptionsSchema } from './options.ts';
import { startDockerPortRelay } from './port-relay.ts';
import { detectHostControl, ProcessControl } from './process-control.ts';
import {
  guestHostFdHolders,
  type RuntimeTier,
  runtimeTier,
  stopGuestProcesses,
  tracedLaunch,
  watchSandboxEnd,
} from './runtime-tier.ts';
import { ServiceGroups } from './service-group.ts';
import {
  commitSnapshot,
  deleteSnapshot,
  MANAGED_SNAPSHOT_REPOSITORY,
  managedSnapshotImage,
  splitReference,
  unpauseInterruptedCommits,
} from './snapshot.ts';
import { DockerSpecOptionsSchema } from './spec-options.ts';
import { DockerToolchainCheck } from './toolchain-view.ts';

export { DOCKER_LABEL_PREFIX } from './container-listing.ts';
export {
  DEFAULT_BUILD_RESOURCES,
  DEFAULT_CAPABILITIES,
  type DockerProviderOptions,
  DockerProviderOptionsSchema,
  SANDBOX_READONLY_PATHS,
} from './options.ts';
export { DockerSpecOptionsSchema } from './spec-options.ts';

export class DockerProvider implements SandboxProvider {
  readonly specificationVersion = PROVIDER_SPECIFICATION_VERSION;
  readonly name = 'docker';
  readonly capabilityHints = {
    gpus: 'set `gpus: true` in its options on an engine with the NVIDIA runtime',
    diskLimit: 'disk limits need overlay2 on xfs with pquota; then set `diskQuota: true`',
  };
  readonly capabilities: ProviderCapabilities;
  readonly #docker: Docker;
  readonly #context: ProviderContext;
  readonly #options: z.output<typeof DockerProviderOptionsSchema>;
  /** Sessions by sandbox id, then by session name and user. */
  readonly #sessions = new SessionTable();
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
  /** Sandboxes by name and by label (`get`, `list`). */
  readonly #listing: ContainerListing;
  /** Each sandbox's companion services (`spec.services`), made and removed with it. */
  readonly #services: ServiceGroups;
  /** Files and archives through the engine's archive API. */
  readonly #files: ContainerFiles;
  /** Why a command ended without a normal exit, and whether its sandbox is still there. */
  readonly #loss: LossCheck;
  /** What the configured OCI runtime changes (gVisor: see `runtime-tier.ts`). */
  readonly #tier: RuntimeTier;
  /** Which engine answers (Docker or Podman) and what its creates need. */
  readonly #engine: EngineTraits;
  /** Live snapshots under gVisor: checkpoints kept, sandboxes stopped for one, commands running. */
  readonly #live: LiveForks;

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
    // dockerode keeps a function that finds the default unix socket when none was given.
    const isEngineLocal = typeof engineSocket === 'string' || typeof engineSocket === 'function';
    this.#live = new LiveForks(docker, join(context.stateDirectory, 'checkpoints'), context.logger);
    this.#hostAccess = new HostAccessPolicy(
      this.#options,
      typeof engineSocket === 'string' ? engineSocket : this.#options.socketPath,
    );
    this.#processes = new ProcessControl(
      detectHostControl({
        helperPath: this.#options.execHelperPath,
        isEngineLocal,
      }),
      context.logger,
    );
    this.#listing = new ContainerListing(docker, context.namespace, this.name, this.#engine, (id) =>
      this.containerName(id),
    );
    this.#services = new ServiceGroups(docker, this.#options.runtime, this.#engine, (id) =>
      this.containerName(id),
    );
    this.#files = new ContainerFiles(
      (id) => docker.getContainer(this.containerName(id)),
      (id) => this.get(id),
    );
    this.#loss = new LossCheck(this.#processes, this.#oomCounts, (id) => this.get(id), {
      docker,
      tier: this.#tier,
    });
    this.capabilities = dockerCapabilities({
      tier: this.#tier,
      hostControl: this.#processes.host.mode,
      helperMounted: this.#processes.helperBind !== null,
      isEngineLocal,
      options: this.#options,
    });
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
  sweepBuildLeftovers(): Promise<void> {
    return this.#images.sweepLeftoversLogged();
  }

  /**
   * Starts again the sandboxes a daemon killed during their live snapshot left stopped, and
   * removes those half-made snapshots (`LiveForks.resumeInterrupted`); what the daemon's start
   * runs before its first reconcile. Never throws. Returns the sandboxes started again.
   */
  async resumeInterruptedSnapshots(): Promise<string[]> {
    await unpauseInterruptedCommits(this.#docker, this.#context.namespace, this.#context.daemonId).catch(
      (error: unknown) =>
        this.#context.logger.warn({ error: String(error) }, 'could not look for sandboxes left paused'),
    );
    return this.#live
      .resumeInterrupted((image) => deleteSnapshot(this.#docker, this.#context.namespace, image))
      .catch((error: unknown) => {
        this.#context.logger.warn({ error: String(error) }, 'could not look for interrupted live snapshots');
        return [];
      });
  }

  health(): Promise<ProviderHealth> {
    return engineHealth({
      docker: this.#docker,
      engine: this.#engine,
      tier: this.#tier,
      runtime: this.#options.runtime,
      timeoutKill: this.capabilities.timeoutKill,
      hostControlGap: this.#hostControlGap(),
      liveFork: this.capabilities.liveFork ? () => this.#live.unavailable() : undefined,
    });
  }

  /** Why commands cannot be confined and stopped from the host; undefined when they can. */
  #hostControlGap(): string | undefined {
    return (
      this.#tier.hostControlGap ??
      (this.#processes.host.mode === 'tagged' ? this.#processes.host.reason : undefined)
    );
  }

  async create(spec: SandboxSpec, options: CreateOptions = {}): Promise<SandboxInfo> {
    requireSpecCapabilities(this.name, this.capabilities, spec, this.capabilityHints);
    if (options.restore !== undefined && !this.capabilities.liveFork)
      throw new GymError('CAPABILITY_UNSUPPORTED', 'this docker provider restores no checkpoint (liveFork)', {
        details: { provider: this.name, capability: 'liveFork', runtime: this.#tier.runtime },
      });
    const specOptions = parseOrThrow(
      DockerSpecOptionsSchema,
      spec.providerOptions,
      'providerOptions for docker',
    );
    this.#hostAccess.checkNetwork(spec.network);
    this.#hostAccess.checkCapabilities(specOptions.capAdd, DEFAULT_CAPABILITIES);
    const binds = await this.#hostAccess.resolveBinds(specOptions.readOnlyBinds);
    const identity = sandboxIdentity(options, this.#context, spec.ttlSeconds);
    const { id } = identity;
    const createdAtMs = Date.parse(identity.createdAt);
    const leaseExpiresAtMs = Date.parse(identity.leaseExpiresAt);
    const deadlineAtMs = Date.parse(identity.deadlineAt);
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
    let container: Docker.Container;
    try {
      container = await this.#imageSources.createContainer(
        spec.image,
        sandboxContainerOptions({
          name: this.containerName(id),
          spec,
          labels,
          binds,
          capAdd: specOptions.capAdd,
          shmSizeMiB: specOptions.shmSizeMiB,
          helperBind: this.#processes.helperBind,
          init: this.#options.init,
          runtime: this.#options.runtime,
          tier: this.#tier,
          engineHostConfig: await this.#engine.hostConfig(),
        }),
      );
    } catch (error) {
      throw wrapDockerError(error, { operation: 'create', image: spec.image });
    }

    try {
      if (options.restore === undefined) await container.start();
      else await this.#live.restore(container, options.restore);
      this.#oomCounts.start(id);
      if (this.#processes.helperBind !== null) this.#processes.created(id, container.id);
      await this.#services.start(id, spec, container.id, labels);
      if (spec.files.length > 0) await writeSeedFiles(container, spec);
      if (spec.readiness !== undefined)
        await waitUntilReady(spec.readiness, (request) => this.exec(id, request));
    } catch (error) {
      await this.#services
        .removeGroup(id, container)
        .catch((removeError: unknown) =>
          this.#context.logger.warn(
            { sandboxId: id, error: String(removeError) },
            'could not remove a sandbox whose create failed',
          ),
        );
      this.#oomCounts.forget(id);
      const cause = wrapDockerError(error, { operation: 'start', sandboxId: id });
      // A companion that never became healthy is the task's fault: its code is kept.
      throw new GymError(
        cause.code === 'SERVICE_UNHEALTHY' ? cause.code : 'SANDBOX_START_FAILED',
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
      createdAt: identity.createdAt,
      leaseExpiresAt: identity.leaseExpiresAt,
      deadlineAt: identity.deadlineAt,
      providerRef: container.id,
    };
  }

  async get(id: string): Promise<SandboxInfo> {
    await this.#live.whenOpen(id);
    return this.#listing.get(id);
  }

  /**
   * One listing call: the engine answers whole or not at all, and then it is the one unreachable
   * scope. A sandbox stopped for its live snapshot's checkpoint is shown ready: it runs again in
   * a moment, and a reconcile must not take the stop for a death.
   */
  async list(filter: ListFilter = {}): Promise<SandboxListing> {
    const listing = await this.#listing.list(filter);
    return {
      ...listing,
      sandboxes: listing.sandboxes.map((info) =>
        this.#live.isClosed(info.id) ? { ...info, state: 'ready' as const } : info,
      ),
    };
  }

  exec(id: string, request: ExecRequest, options: ExecOptions = {}): Promise<ExecResult> {
    return this.#live.running(id, () => this.#execOpen(id, request, options));
  }

  async #execOpen(id: string, request: ExecRequest, options: ExecOptions): Promise<ExecResult> {
    // Under gVisor an exec's stream outlives its sandbox: the sandbox's end is watched instead.
    if (this.#tier.hasGuestKernel)
      return watchSandboxEnd(this.#docker.getContainer(this.containerName(id)), options, (watched) =>
        this.#exec(id, request, watched),
      ).then((ended) => (ended === 'ended' ? this.#endedUnder(id, request) : ended));
    return this.#exec(id, request, options);
  }

  /** The result of a command whose gVisor sandbox ended under it: why it ended, read from the engine. */
  async #endedUnder(id: string, request: ExecRequest): Promise<ExecResult> {
    const loss = await this.#loss.lossCause(id, this.#docker.getContainer(this.containerName(id)));
    const output = new ExecOutput(request);
    return loss === null ? output.result('sandbox_gone', null) : output.lost(loss.lost, loss.reason);
  }

  async #exec(id: string, request: ExecRequest, options: ExecOptions): Promise<ExecResult> {
    const container = this.#docker.getContainer(this.containerName(id));
    const hooks = this.#loss.hooks(id, container);
    try {
      if (request.session !== undefined) {
        const session = await this.#session(id, container, request.session, request.user);
        return await this.#loss.confirmAlive(id, container, await session.run(request, options, hooks));
      }
      const confinement =
        this.#tier.hostControlGap === undefined ? await this.#processes.confinement(id, container) : null;
      const tracer = this.#guestHelper();
      const launched = tracer === null ? request : tracedLaunch(request, tracer);
      const result = await runOneShotExec(container, launched, options, hooks, confinement, tracer);
      // Podman's exit for a command its runtime could not start is 125, Docker's 126.
      if (result.status === 'ok' && result.exitCode === 125 && (await this.#engine.kind()) === 'podman')
        return { ...result, exitCode: 126 };
      return await this.#loss.confirmAlive(id, container, result);
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

  #session(
    id: string,
    container: Docker.Container,
    name: string,
    user: string | undefined,
  ): Promise<ShellSession> {
    // Only opening a session looks up the confinement: the per-command path stays as fast as it was.
    return this.#sessions.session(id, name, user, () =>
      (this.#tier.hostControlGap === undefined
        ? this.#processes.confinement(id, container)
        : Promise.resolve(null)
      ).then((confinement) =>
        openDockerSession(container, user, confinement, {
          pipes: this.#options.sessionPipes,
          tracer: this.#guestHelper(),
        }),
      ),
    );
  }

  /** Under gVisor, the exec helper's path in the sandbox when it is mounted there (commands run traced). */
  #guestHelper(): string | null {
    return this.#tier.hasGuestKernel && this.#processes.helperBind !== null ? EXEC_HELPER_MOUNT : null;
  }

  // Files and archives count as running for a live snapshot, as commands do.
  writeFile(id: string, path: string, content: FileContent, options: WriteFileOptions = {}): Promise<void> {
    return this.#live.running(id, () => this.#files.writeFile(id, path, content, options));
  }

  readFile(id: string, path: string): Promise<Readable> {
    return this.#live.running(id, () => this.#files.readFile(id, path));
  }

  writeArchive(id: string, directory: string, archive: Readable): Promise<void> {
    return this.#live.running(id, () => this.#files.writeArchive(id, directory, archive));
  }

  readArchive(id: string, directory: string): Promise<Readable> {
    return this.#live.running(id, () => this.#files.readArchive(id, directory));
  }

  /**
   * Relays `http://127.0.0.1:<port>` inside the sandbox to the gateway socket: on any free port
   * the first time, on the recorded URL's port after a restart. The sandbox has a network
   * namespace of its own, so its port collides with no other sandbox's.
   */
  async exposeGateway(id: string, options: { socketPath: string; url?: string }): Promise<{ url: string }> {
    if (!this.capabilities.gatewayReach) throw gatewayReachUnsupported(this.name, this.#tier);
    const container = this.#docker.getContainer(this.containerName(id));
    return { url: await this.#relays.expose(id, container, options) };
  }

  openPortRelay(id: string): Promise<PortRelay> {
    return startDockerPortRelay(this.#docker.getContainer(this.containerName(id)), id, {
      relayHelperPath: this.#options.relayHelperPath,
      writeFile: (path, content, mode) => this.writeFile(id, path, content, { mode }),
    });
  }

  /** What the gateway relays hold (listeners, open and refused connections), for metrics. */
  relayStats(): RelayStats {
    return this.#relays.stats();
  }

  /** A terminal: an exec with `Tty` (`docker-pty.ts`); it dies with the container. */
  openPty(id: string, request: PtyOpenRequest, options: PtyOpenOptions): Promise<PtyChannel> {
    const container = this.#docker.getContainer(this.containerName(id));
    return this.#live.running(id, () => openDockerPty(container, id, request, options));
  }

  async destroy(id: string): Promise<void> {
    this.#sessions.close(id);
    this.#relays.close(id);
    this.#oomCounts.forget(id);
    this.#processes.forget(id);
    this.#loss.destroyStarted(id);
    try {
      await this.#services.removeGroup(id, this.#docker.getContainer(this.containerName(id)));
    } catch (error) {
      throw wrapDockerError(error, { operation: 'destroy', sandboxId: id });
    } finally {
      // Commands that ended with the container have looked already: nothing runs in it now.
      this.#loss.destroyEnded(id);
    }
  }

  /**
   * Kills every process in the sandbox but its init and idle keeper (the container stays up), and
   * drops its sessions, whose shells die with the rest.
   */
  async stopProcesses(id: string): Promise<{ killed: number }> {
    if (!this.capabilities.stopProcesses)
      throw stopProcessesUnsupported(this.name, this.#tier, this.#hostControlGap());
    const container = this.#docker.getContainer(this.containerName(id));
    return this.#live.running(id, async () => {
      this.#sessions.close(id);
      try {
        if (this.#tier.hasGuestKernel)
          return { killed: await stopGuestProcesses(container, EXEC_HELPER_MOUNT) };
        return { killed: await this.#processes.stopProcesses(id, container) };
      } catch (error) {
        throw wrapStopError(error, id);
      }
    });
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

  async snapshot(id: string, options: SnapshotOptions): Promise<SnapshotResult> {
    const name = this.containerName(id);
    const commit = () =>
      commitSnapshot(this.#docker, name, this.#hostAccess, this.#context.namespace, id, options);
    if (options.live !== true) {
      await this.#live.whenOpen(id);
      return commit();
    }
    if (!this.capabilities.liveFork || options.managedId === undefined)
      throw new GymError(
        'CAPABILITY_UNSUPPORTED',
        this.capabilities.liveFork
          ? 'a live snapshot is a managed one only (the daemon names it)'
          : `this docker provider cannot carry processes over: ${this.#tier.hasGuestKernel ? 'its engine is not on this host' : `runtime ${this.#tier.runtime} has no checkpoint here (gVisor's runsc has)`}`,
        { details: { provider: this.name, capability: 'liveFork', runtime: this.#tier.runtime } },
      );
    // A session's shell holds its exec's stream, which gVisor cannot restore: sessions end here.
    this.#sessions.close(id);
    const container = this.#docker.getContainer(name);
    return this.#live.snapshot(id, container, options.managedId, {
      scan: () => guestHostFdHolders(container, EXEC_HELPER_MOUNT),
      image: managedSnapshotImage(this.#context.namespace, options.managedId),
      maxBytes: options.maxBytes,
      commit,
      removeImage: (image) => deleteSnapshot(this.#docker, this.#context.namespace, image),
      // The container has a new cgroup, whose OOM count starts at 0.
      restarted: () => this.#oomCounts.start(id),
    });
  }

  async deleteSnapshot(image: string): Promise<void> {
    await deleteSnapshot(this.#docker, this.#context.namespace, image);
    // A live snapshot's checkpoint is named as its image's tag (the snapshot id).
    if (image.startsWith(`${MANAGED_SNAPSHOT_REPOSITORY}/`))
      await this.#live.remove(splitReference(image).tag);
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
    this.#sessions.closeAll();
    this.#relays.closeAll();
  }
}
