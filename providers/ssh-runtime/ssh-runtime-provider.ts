/**
 * A container runtime over SSH: sandboxes are the runtime's containers on the hosts of an
 * inventory (compute nodes) or of a Slurm allocation, reached through a pool of SSH connections
 * per host (providers/ssh/); the runtime itself is a driver (`./driver.ts`).
 *
 * - Hosts, placement (the most free slots) and a state file per sandbox are the HostFleet's,
 *   joined with the runtime's own listing, so a reaper without the daemon's state still finds
 *   orphans. A host that stops answering makes its commands `sandbox_gone` and its sandboxes
 *   `unreachable`. In Slurm mode the hosts are the nodes of an allocation held from the first
 *   create (providers/ssh/slurm-hosts.ts); when it ends its sandboxes are gone.
 * - Exec is the driver's entry over a fresh SSH channel, through the host's busybox bound at
 *   `/.gym-tools/busybox` (no program of the sandbox's own sets env or working directory, moves
 *   files or kills). A timeout kills by tag from the host, in the sandbox's pid namespace only,
 *   out of the agent's reach. Sessions are one held shell each (`../ssh/ssh-session.ts`).
 * - Gateway reach: the relay, copied to each host once and bound at `/.gym-tools/gym-relay`, runs in
 *   the sandbox over one held channel on its own loopback (`--network none`); the daemon joins each
 *   connection to the gateway socket only (`../shared/gateway-relay.ts`). Images: `./image-store.ts`.
 */
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import type { Readable } from 'node:stream';
import { z } from 'zod';
import { GymError, isGymError } from '../../core/errors.ts';
import type { ExecRequest, ExecResult } from '../../core/schemas/exec.ts';
import type { SandboxInfo, SandboxSpec } from '../../core/schemas/sandbox.ts';
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
  type WriteFileOptions,
} from '../sandbox-provider.ts';
import type { SandboxLoss } from '../shared/abnormal-end.ts';
import {
  CommandCannotStart,
  cannotStartResult,
  ExecOutput,
  markSandboxLost,
  SIGKILL_EXIT_CODE,
  stdinBytes,
} from '../shared/exec-output.ts';
import { type GatewayRelay, relayStatsOf } from '../shared/gateway-relay.ts';
import { loopbackGatewayUrl, recordedGatewayPort } from '../shared/gateway-url.ts';
import {
  EXEC_ID_ENV,
  hostKillNamespaceArgv,
  hostKillScriptArgv,
  KILL_FAILED_NOTE,
  KILL_FAILED_REASON,
  type KillOutcome,
  type KillReach,
} from '../shared/kill-script.ts';
import { waitUntilReady } from '../shared/readiness.ts';
import { RelayTable } from '../shared/relay-table.ts';
import { sandboxIdentity } from '../shared/sandbox-identity.ts';
import { SessionTable } from '../shared/session-table.ts';
import { shellJoin } from '../shared/shell.ts';
import type { ShellSession } from '../shared/shell-session.ts';
import { requireSpecCapabilities } from '../shared/spec-capabilities.ts';
import { type FleetHost, type HostConfig, HostFleet, type RemoteResult } from '../ssh/host-fleet.ts';
import { SlurmHosts } from '../ssh/slurm-hosts.ts';
import { openSshSession, startSshRelay } from '../ssh/ssh-session.ts';
import {
  DEFAULT_PATH,
  RELAY_IN_SANDBOX,
  type RuntimeAccess,
  type SshRuntimeDriver,
  TOOLS,
  wrappedArgv,
} from './driver.ts';
import { SshImageStore } from './image-store.ts';
import type { SshRuntimeOptions } from './options.ts';
import { SshSandboxFiles } from './sandbox-files.ts';

/** A sandbox's relay, with what its release needs to kill its process by tag. */
interface OpenRelay<H extends HostConfig, Target> {
  relay: GatewayRelay;
  execId: string;
  host: FleetHost<H>;
  target: Target;
  readonly isOpen: boolean;
  close(): void;
}

export class SshRuntimeProvider<H extends HostConfig, Target> implements SandboxProvider {
  readonly specificationVersion = PROVIDER_SPECIFICATION_VERSION;
  readonly name: string;
  readonly capabilities: ProviderCapabilities;
  /** The hosts, their connections, placement and the sandboxes' state files. */
  readonly fleet: HostFleet<H>;
  /** Slurm mode: the allocation whose nodes are the fleet's hosts. */
  readonly slurm: SlurmHosts | null = null;
  readonly #driver: SshRuntimeDriver<H, Target>;
  readonly #hostSchema: z.ZodType<H>;
  readonly #context: ProviderContext;
  readonly #options: SshRuntimeOptions<H>;
  readonly #images: SshImageStore<H>;
  readonly #sessions = new SessionTable();
  readonly #relays = new RelayTable<OpenRelay<H, Target>>();
  readonly #relayCounters = { refusedTotal: 0 };
  readonly #files = new SshSandboxFiles(
    (id, args, stdin) => this.#tools(id, args, stdin),
    (id) => this.#target(id),
  );

  constructor(
    hostSchema: z.ZodType<H>,
    options: SshRuntimeOptions<H>,
    context: ProviderContext,
    createDriver: (access: RuntimeAccess<H>) => SshRuntimeDriver<H, Target>,
  ) {
    this.#hostSchema = hostSchema;
    this.#context = context;
    this.#options = options;
    this.#driver = createDriver({
      context,
      run: (host, command, stdin) => this.fleet.run(host, command, stdin),
      nameOf: (id) => this.#nameOf(id),
      statePath: (host, id) => this.fleet.statePath(host, id),
      exists: (host, id) => this.fleet.exists(host, id),
    });
    this.name = this.#driver.runtime;
    this.capabilities = {
      sessions: true,
      snapshot: false,
      gpus: false,
      diskLimit: false,
      networkModes: ['none'],
      timeoutKill: 'tagged',
      stopProcesses: true,
      imageFormats: ['rootfs', 'derived'],
      ...this.#driver.capabilities,
      gatewayReach: options.gatewayReach && existsSync(options.relayHelperPath),
    };
    this.fleet = this.#fleet(options.hosts ?? []);
    if (options.slurm !== undefined)
      this.slurm = new SlurmHosts(options.slurm, {
        logger: context.logger,
        namespace: context.namespace,
        checkHost: (host) => hostSchema.parse(host),
        setHosts: (hosts) => this.setHosts(hosts),
        list: () => this.fleet.list(),
        reap: (hosts) => this.#reap(z.array(hostSchema).parse(hosts), this.#context.clock.now()),
      });
    this.#images = new SshImageStore(this.name, this.#driver.images, context, this.fleet, this.slurm);
  }

  /** How many times an image was copied to a host, and derived images made on one (tests count them). */
  get imageCopies(): number {
    return this.#images.copies;
  }
  get imageBuilds(): number {
    return this.#images.builds;
  }

  #fleet(hosts: H[]): HostFleet<H> {
    return new HostFleet({
      runtime: this.#driver.runtime,
      namespace: this.#context.namespace,
      logger: this.#context.logger,
      connection: this.#options,
      hosts,
      ...(this.#driver.stateFolder === undefined ? {} : { stateFolder: this.#driver.stateFolder }),
      liveNames: (host) => this.#driver.liveNames(host),
      nameOf: (id) => this.#nameOf(id),
    });
  }

  #nameOf = (id: string): string => `gym-${this.#context.namespace}-${id}`;

  /**
   * Removes our sandboxes on hosts that left with an ended Slurm allocation (without
   * pam_slurm_adopt what SSH started outlives the job), sparing those created after `endedAt`
   * (the next allocation's, maybe on the same nodes); a node that no longer lets us in is passed over.
   */
  async #reap(hosts: H[], endedAt: number): Promise<void> {
    const fleet = this.#fleet(hosts);
    try {
      await Promise.all(
        fleet.hosts.map(async (host) => {
          const sandboxes = await fleet.listHost(host).catch(() => []);
          for (const info of sandboxes)
            if (Date.parse(info.createdAt) <= endedAt)
              await fleet.run(host, this.#driver.removeLine(host, info.id)).catch(() => {});
        }),
      );
    } finally {
      fleet.close();
    }
  }

  /** Before anything that looks for sandboxes: in Slurm mode, the allocation a restarted daemon left. */
  async #resumed(): Promise<void> {
    await this.slurm?.resume();
  }

  /** Replaces the hosts: one that leaves takes its sandboxes out of reach (`sandbox_gone`); new ones take creates. */
  setHosts(hosts: unknown): void {
    this.fleet.setHosts(z.array(this.#hostSchema).parse(hosts));
  }

  /** The host and target of a sandbox; SANDBOX_NOT_FOUND when it has none. */
  async #target(id: string): Promise<{ host: FleetHost<H>; target: Target }> {
    await this.#resumed();
    const host = await this.fleet.locate(id);
    const target = await this.#driver.target(host, id);
    if (target === null) throw new GymError('SANDBOX_NOT_FOUND', `sandbox ${id} does not exist`);
    return { host, target };
  }

  async health(): Promise<ProviderHealth> {
    const version = (host: FleetHost<H>) => this.#driver.versionLine(host);
    if (this.slurm === null) return this.fleet.health(version);
    const slurm = await this.slurm.health();
    if (!slurm.ok || this.fleet.hosts.length === 0) return slurm;
    const hosts = await this.fleet.health(version);
    return { ...hosts, details: { ...hosts.details, slurm: slurm.details } };
  }

  async create(spec: SandboxSpec, options: CreateOptions = {}): Promise<SandboxInfo> {
    requireSpecCapabilities(this.name, this.capabilities, spec);
    const unpin = this.slurm === null ? () => {} : await this.slurm.ensure();
    try {
      return await this.#createOnFleet(spec, options);
    } finally {
      unpin();
    }
  }

  async #createOnFleet(spec: SandboxSpec, options: CreateOptions): Promise<SandboxInfo> {
    const host = await this.fleet.pick();
    const imageConfig = await this.#images.ensure(host, spec.image);
    const relay = this.capabilities.gatewayReach
      ? await this.fleet.placeRelay(host, this.#options.relayHelperPath)
      : null;
    const { id, ...times } = sandboxIdentity(options, this.#context, spec.ttlSeconds);
    const name = this.#nameOf(id);
    const info: SandboxInfo = {
      id,
      provider: this.name,
      state: 'ready',
      image: spec.image,
      labels: spec.labels,
      namespace: this.#context.namespace,
      daemonId: this.#context.daemonId,
      pool: options.pool ?? null,
      ...times,
      providerRef: `${host.name}/${name}`,
      scope: host.name,
    };
    this.fleet.place(id, host);
    try {
      // The state file first: a crash after it leaves a record a reaper can act on.
      await this.fleet.writeRecord(host, id, { info, spec, imageConfig });
      const image = this.#images.hostPath(host, spec.image);
      await this.#driver.start(host, { id, name, image, relay, spec });
      if (spec.user !== undefined) await this.#userFlags(id, spec.user);
      for (const file of spec.files)
        await this.writeFile(id, file.path, Buffer.from(file.content, file.encoding), { mode: file.mode });
      if (spec.readiness !== undefined)
        await waitUntilReady(spec.readiness, (request) => this.exec(id, request));
      return info;
    } catch (error) {
      await this.destroy(id).catch(() => {});
      throw error;
    }
  }

  async list(filter: ListFilter = {}): Promise<SandboxListing> {
    await this.#resumed();
    const listing = await this.fleet.list(filter);
    const unanswered = this.slurm?.unanswered();
    // Slurm does not say which allocation is ours: its nodes' sandboxes are out of sight.
    return unanswered === undefined || unanswered === null
      ? listing
      : { ...listing, unreachable: [...listing.unreachable, { scope: 'slurm', reason: unanswered }] };
  }

  async get(id: string): Promise<SandboxInfo> {
    await this.#resumed();
    return this.fleet.get(id);
  }

  async exec(id: string, request: ExecRequest, options: ExecOptions = {}): Promise<ExecResult> {
    try {
      return await this.#exec(id, request, options);
    } catch (error) {
      if (error instanceof CommandCannotStart) return cannotStartResult(error.message);
      throw error;
    }
  }

  async #exec(id: string, request: ExecRequest, options: ExecOptions): Promise<ExecResult> {
    await this.#resumed();
    const host = await this.fleet.locate(id);
    const output = new ExecOutput(request, options);
    if (request.session !== undefined) {
      let session: ShellSession;
      try {
        session = await this.#session(host, id, request.session, request.user);
      } catch (error) {
        // The host does not answer (or left the set): as for a one-shot command.
        if (isGymError(error, 'PROVIDER_UNAVAILABLE')) return output.result('sandbox_gone', null);
        throw error;
      }
      return session.run(request, options, {
        classifyAbnormalEnd: () => this.#driver.abnormalEnd(host, id, true),
      });
    }
    let record: Awaited<ReturnType<HostFleet<H>['record']>>;
    let target: Target | null;
    try {
      record = await this.fleet.record(host, id);
      target = await this.#driver.target(host, id);
    } catch (error) {
      // The host does not answer: its sandboxes are out of reach, as good as gone for a command.
      if (isGymError(error, 'PROVIDER_UNAVAILABLE')) return output.result('sandbox_gone', null);
      throw error;
    }
    if (target === null) return output.result('sandbox_gone', null);
    const { spec, imageConfig } = record;
    const user = request.user ?? spec.user;
    const as = user === undefined ? [] : await this.#userFlags(id, user);
    const tag = randomBytes(12).toString('hex');
    const env = {
      PATH: DEFAULT_PATH,
      HOME: '/root',
      ...imageConfig?.env,
      ...spec.env,
      ...request.env,
      [EXEC_ID_ENV]: tag,
    };
    const cwd = request.cwd ?? spec.workdir ?? imageConfig?.workdir ?? '/';
    const argv = request.argv ?? ['/bin/sh', '-c', request.command!];
    const line = this.#driver.enter(host, target, wrappedArgv(env, cwd, argv, 'gym-exec'), { tag, as });
    const abort = new AbortController();
    let timedOut = false;
    let killing: Promise<KillOutcome> | null = null;
    const kill = () => {
      killing ??= this.#killTagged(host, id, target, tag);
      void killing.finally(() => abort.abort());
    };
    const timer = setTimeout(() => {
      timedOut = true;
      kill();
    }, request.timeoutMs);
    options.signal?.addEventListener('abort', kill, { once: true });
    let exit: { code: number | null; signal: string | null } | null = null;
    let lost = false;
    try {
      exit = await host.connection.exec(line, {
        stdin: stdinBytes(request) ?? Buffer.alloc(0),
        signal: abort.signal,
        onStdout: (chunk) => output.push('stdout', chunk),
        onStderr: (chunk) => output.push('stderr', chunk),
      });
    } catch (error) {
      if (!timedOut) {
        if (!isGymError(error, 'PROVIDER_UNAVAILABLE')) throw error;
        lost = true;
      }
    } finally {
      clearTimeout(timer);
      options.signal?.removeEventListener('abort', kill);
    }
    const ended = output.result('ok', exit?.code ?? null);
    const gone =
      lost ||
      (exit?.code === 255 && this.#driver.isGone(ended.stderr) && !(await this.fleet.exists(host, id)));
    const sigkilled = exit !== null && (exit.signal === 'SIGKILL' || exit.code === SIGKILL_EXIT_CODE);
    let status: ExecResult['status'] = timedOut ? 'timeout' : gone ? 'sandbox_gone' : 'ok';
    let loss: SandboxLoss | null = null;
    if (status === 'ok' && (sigkilled || exit?.signal != null || exit?.code === null)) {
      const end = await this.#driver.abnormalEnd(host, id, sigkilled);
      if (typeof end === 'object') loss = end;
      else status = end;
    }
    // The kill had to take the sandbox: the command resisted it, so the loss is its own.
    const isKilledWhole = killing !== null && (await killing) === 'sandbox_killed';
    if (status === 'sandbox_gone' || isKilledWhole) this.#driver.lost(id);
    const exitCode =
      status === 'ok'
        ? (exit?.code ?? null)
        : (status === 'killed' || status === 'oom') && sigkilled
          ? SIGKILL_EXIT_CODE
          : null;
    const result: ExecResult = { ...ended, status, exitCode };
    if (isKilledWhole)
      return markSandboxLost(
        { ...result, stderr: `${result.stderr}${KILL_FAILED_NOTE.toString()}` },
        timedOut ? 'timeout' : 'killed',
        KILL_FAILED_REASON,
      );
    return loss === null ? result : markSandboxLost(result, loss.lost, loss.reason);
  }

  /** The driver's entry flags for `user`; what the runtime cannot run as it throws for. */
  async #userFlags(id: string, user: string): Promise<string[]> {
    const { uid, gid } = await this.#files.resolveUser(id, user);
    return this.#driver.userFlags(uid, gid, user);
  }

  /**
   * Kills the sandbox's processes carrying the tag from the host (its busybox over its /proc, in
   * the sandbox's pid namespace): a kill script inside would run as the agent's user, who could
   * stop it (SIGSTOP) before it killed anything, so that the command and its channels never ended.
   */
  async #killTagged(
    host: FleetHost<H>,
    id: string,
    target: Target,
    tag: string,
    reach: KillReach = 'tagged-and-their-sessions',
  ): Promise<KillOutcome> {
    try {
      const scope = await this.#driver.killScope(host, target);
      if (scope === null) return 'killed';
      const { guard, namespace } = scope;
      const ran = await this.fleet.run(
        host,
        `${guard}exec ${shellJoin(hostKillScriptArgv(host.busyboxPath, namespace, tag, reach))}`,
      );
      if (ran.code === 0) return 'killed';
      // It gave up (a fork loop outran its passes): the sandbox's namespace goes whole, which no
      // fork outruns; resisting its kill cost the command its sandbox.
      this.#context.logger.warn(
        { sandboxId: id },
        'the timeout kill did not take effect; killing the sandbox',
      );
      await this.fleet
        .run(host, `${guard}exec ${shellJoin(hostKillNamespaceArgv(host.busyboxPath, namespace))}`)
        .catch(() => null);
      return 'sandbox_killed';
    } catch {
      // A host that does not answer: its commands end as it does.
      return 'killed';
    }
  }

  async stopProcesses(id: string): Promise<{ killed: number }> {
    const { host, target } = await this.#target(id);
    // Session shells and the relay are among the processes killed: dropped first, started again on use.
    this.#sessions.close(id);
    await this.#releaseRelay(id, false);
    // From the host: a script inside would run as the agent's user, which could stop it.
    const result = await this.fleet.run(host, await this.#driver.stopLine(host, id, target));
    if (result.code !== 0)
      throw new GymError('PROVIDER_ERROR', `stopping processes of ${id}: ${result.stderr.trim()}`);
    return { killed: Number(result.stdout.toString().trim()) || 0 };
  }

  /** Runs the bound busybox with `args` in the sandbox; SANDBOX_NOT_FOUND when it is gone. */
  async #tools(id: string, args: string[], stdin?: Readable): Promise<RemoteResult> {
    const { host, target } = await this.#target(id);
    const result = await this.fleet.run(host, this.#driver.enter(host, target, [TOOLS, ...args]), stdin);
    if (result.code === 255 && this.#driver.isGone(result.stderr)) {
      this.#driver.lost(id);
      throw new GymError('SANDBOX_NOT_FOUND', `sandbox ${id} does not exist`);
    }
    return result;
  }

  writeFile(id: string, path: string, content: FileContent, options: WriteFileOptions = {}): Promise<void> {
    return this.#files.writeFile(id, path, content, options);
  }

  readFile(id: string, path: string): Promise<Readable> {
    return this.#files.readFile(id, path);
  }

  writeArchive(id: string, directory: string, archive: Readable): Promise<void> {
    return this.#files.writeArchive(id, directory, archive);
  }

  readArchive(id: string, directory: string): Promise<Readable> {
    return this.#files.readArchive(id, directory);
  }

  async destroy(id: string): Promise<void> {
    await this.#resumed();
    this.#sessions.close(id);
    await this.#releaseRelay(id, false);
    const host = await this.fleet.hostToDestroy(id);
    if (host !== null) {
      await this.fleet.run(host, this.#driver.removeLine(host, id));
      this.fleet.forget(id);
    }
    this.#driver.forget(id);
  }

  /** The session shell `name` for `user`, opened on first use (and after it was lost), entered as a command is. */
  #session(host: FleetHost<H>, id: string, name: string, user: string | undefined): Promise<ShellSession> {
    return this.#sessions.session(id, name, user, async () => {
      const { spec, imageConfig } = await this.fleet.record(host, id);
      const target = await this.#driver.target(host, id);
      if (target === null) throw new GymError('SANDBOX_NOT_FOUND', `sandbox ${id} does not exist`);
      const effective = user ?? spec.user;
      const as = effective === undefined ? [] : await this.#userFlags(id, effective);
      const env = { PATH: DEFAULT_PATH, HOME: '/root', ...imageConfig?.env, ...spec.env };
      const cwd = spec.workdir ?? imageConfig?.workdir ?? '/';
      const line = this.#driver.enter(host, target, wrappedArgv(env, cwd, ['/bin/sh'], 'gym-session'), {
        as,
      });
      // Only the command's processes: the shell shares their session. From the host, out of
      // the agent's reach: a failed pass is not escalated to the sandbox (yet).
      return openSshSession(host.connection, line, (execId) =>
        this.#killTagged(host, id, target, execId, 'tagged-only'),
      );
    });
  }

  /**
   * Relays `http://127.0.0.1:<port>` in the sandbox (its own loopback) to the gateway socket over
   * one SSH channel: any free port the first time, the recorded URL's port after a restart.
   */
  async exposeGateway(id: string, options: { socketPath: string; url?: string }): Promise<{ url: string }> {
    if (!this.capabilities.gatewayReach)
      throw new GymError(
        'CAPABILITY_UNSUPPORTED',
        `gateway reach is off for this ${this.#driver.runtime} provider (option gatewayReach, or no relay at ${this.#options.relayHelperPath}: run scripts/setup.sh)`,
        { details: { provider: this.name, capability: 'gatewayReach' } },
      );
    const open = await this.#relays.current(id);
    if (open !== undefined) return { url: loopbackGatewayUrl(open.relay.port) };
    const port = recordedGatewayPort(options.url);
    const started = await this.#relays.open(id, async () => {
      const { host, target } = await this.#target(id);
      if (!(await this.fleet.exists(host, id)))
        throw new GymError('SANDBOX_NOT_FOUND', `sandbox ${id} does not exist`);
      const execId = randomBytes(12).toString('hex');
      const argv = wrappedArgv(
        { PATH: DEFAULT_PATH, [EXEC_ID_ENV]: execId },
        '/',
        [RELAY_IN_SANDBOX, String(port)],
        'gym-relay',
      );
      const relay = await startSshRelay(
        host.connection,
        this.#driver.enter(host, target, argv, { tag: execId }),
        { label: `${host.name}/${this.#nameOf(id)}`, details: { sandboxId: id, host: host.name, port } },
        options.socketPath,
        this.#options.relayMaxConnections,
        this.#relayCounters,
      );
      return {
        relay,
        execId,
        host,
        target,
        get isOpen() {
          return relay.isOpen;
        },
        close: () => relay.close(),
      };
    });
    return { url: loopbackGatewayUrl(started.relay.port) };
  }

  relayStats(): RelayStats {
    const relays = [...this.#relays.openRelays].map((open) => open.relay);
    return relayStatsOf(relays, this.#relayCounters.refusedTotal);
  }

  /** Drops a sandbox's relay; with `kill`, also kills the relay process in the sandbox (by its tag). */
  async #releaseRelay(id: string, kill: boolean): Promise<void> {
    const released = await this.#relays.release(id);
    if (released !== undefined && kill)
      await this.#killTagged(released.host, id, released.target, released.execId, 'tagged-only');
  }

  async prepareImage(source: ImageSource): Promise<void> {
    return this.#images.prepare(source);
  }

  async inspectImage(reference: string): Promise<ImageInfo | null> {
    return this.#images.inspect(reference);
  }

  async listImages(filter: ImageFilter = {}): Promise<ImageInfo[]> {
    return this.#images.list(filter);
  }

  async close(): Promise<void> {
    // The sandboxes live on without reach until a daemon restores it at the same URL.
    await Promise.all(this.#relays.sandboxIds.map((id) => this.#releaseRelay(id, true)));
    this.#sessions.closeAll();
    await this.slurm?.close();
    this.fleet.close();
  }
}
