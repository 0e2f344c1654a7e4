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
import { abnormalEndResult } from '../shared/abnormal-end.ts';
import { BusyboxFiles } from '../shared/busybox-files.ts';
import { ExecOutput, orCannotStart, SIGKILL_EXIT_CODE, stdinBytes } from '../shared/exec-output.ts';
import { superviseExec } from '../shared/exec-skeleton.ts';
import { type GatewayRelay, relayStatsOf } from '../shared/gateway-relay.ts';
import { loopbackGatewayUrl, recordedGatewayPort } from '../shared/gateway-url.ts';
import { EXEC_ID_ENV, type KillOutcome, type KillReach, killTaggedOnHost } from '../shared/kill-script.ts';
import { PortRelay } from '../shared/port-relay.ts';
import type { PtyChannel, PtyOpenOptions, PtyOpenRequest } from '../shared/pty-channel.ts';
import { sshPtyChannel } from '../shared/pty-ssh.ts';
import { waitUntilReady } from '../shared/readiness.ts';
import { RelayTable } from '../shared/relay-table.ts';
import { newSandboxInfo, sandboxIdentity } from '../shared/sandbox-identity.ts';
import { SessionTable } from '../shared/session-table.ts';
import type { ShellSession } from '../shared/shell-session.ts';
import { requireSpecCapabilities } from '../shared/spec-capabilities.ts';
import { type FleetHost, type HostConfig, HostFleet, type RemoteResult } from '../ssh/host-fleet.ts';
import { SlurmHosts } from '../ssh/slurm-hosts.ts';
import { openSshSession, sshRelayChannel, startSshRelay } from '../ssh/ssh-session.ts';
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

/** What entering a sandbox takes (`#entry`). */
interface Entry<Target> {
  target: Target;
  as: string[];
  env: Record<string, string>;
  cwd: string;
}

/** A sandbox's relay, with what its release needs to kill its process by tag. */
type OpenRelay<H extends HostConfig, Target> = GatewayRelay & {
  execId: string;
  host: FleetHost<H>;
  target: Target;
};

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
  readonly #files = new BusyboxFiles(
    TOOLS,
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
      // An SSH channel with a pty request around the runtime's entry (`shared/pty-ssh.ts`).
      pty: true,
      ...this.#driver.capabilities,
      gatewayReach: options.gatewayReach && existsSync(options.relayHelperPath),
      // The relay mounted for gateway reach runs in connect mode too (`openPortRelay`).
      ports: options.gatewayReach && existsSync(options.relayHelperPath),
    };
    this.fleet = this.#fleet(options.hosts ?? []);
    if (options.slurm !== undefined)
      this.slurm = new SlurmHosts(options.slurm, {
        logger: context.logger,
        namespace: context.namespace,
        checkHost: (host) => hostSchema.parse(host),
        setHosts: (hosts) => this.setHosts(hosts),
        list: () => this.fleet.list(),
        // Without pam_slurm_adopt what SSH started outlives the job; those made after its end
        // (the next allocation's, maybe on the same nodes) are spared.
        reap: (hosts) =>
          this.#fleet(z.array(hostSchema).parse(hosts)).removeCreatedBy(
            this.#context.clock.now(),
            (host, id) => this.#driver.removeLine(host, id),
          ),
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
    const hosts = () => this.fleet.health((host) => this.#driver.versionLine(host));
    return this.slurm === null
      ? hosts()
      : this.slurm.healthWith(() => (this.fleet.hosts.length === 0 ? null : hosts()));
  }

  async create(spec: SandboxSpec, options: CreateOptions = {}): Promise<SandboxInfo> {
    requireSpecCapabilities(this.name, this.capabilities, spec);
    const create = () => this.#createOnFleet(spec, options);
    return this.slurm === null ? create() : this.slurm.pinned(create);
  }

  async #createOnFleet(spec: SandboxSpec, options: CreateOptions): Promise<SandboxInfo> {
    const host = await this.fleet.pick();
    const imageConfig = await this.#images.ensure(host, spec.image);
    const relay = this.capabilities.gatewayReach
      ? await this.fleet.placeRelay(host, this.#options.relayHelperPath)
      : null;
    const identity = sandboxIdentity(options, this.#context, spec.ttlSeconds);
    const { id } = identity;
    const name = this.#nameOf(id);
    const info = newSandboxInfo(this.name, identity, spec, this.#context, {
      pool: options.pool ?? null,
      providerRef: `${host.name}/${name}`,
      scope: host.name,
    });
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
    return this.slurm?.withUnanswered(listing) ?? listing;
  }

  async get(id: string): Promise<SandboxInfo> {
    await this.#resumed();
    return this.fleet.get(id);
  }

  exec(id: string, request: ExecRequest, options: ExecOptions = {}): Promise<ExecResult> {
    return orCannotStart(this.#exec(id, request, options));
  }

  async #exec(id: string, request: ExecRequest, options: ExecOptions): Promise<ExecResult> {
    await this.#resumed();
    const host = await this.fleet.locate(id);
    const gone = () => new ExecOutput(request, options).result('sandbox_gone', null);
    if (request.session !== undefined) {
      let session: ShellSession;
      try {
        session = await this.#session(host, id, request.session, request.user);
      } catch (error) {
        // The host does not answer (or left the set): as for a one-shot command.
        if (isGymError(error, 'PROVIDER_UNAVAILABLE')) return gone();
        throw error;
      }
      return session.run(request, options, {
        classifyAbnormalEnd: () => this.#driver.abnormalEnd(host, id, true),
      });
    }
    let entry: Entry<Target> | null;
    try {
      entry = await this.#entry(host, id, request.user, request);
    } catch (error) {
      // The host does not answer: its sandboxes are out of reach, as good as gone for a command.
      if (isGymError(error, 'PROVIDER_UNAVAILABLE')) return gone();
      throw error;
    }
    if (entry === null) return gone();
    const { target, env, cwd, as } = entry;
    const tag = randomBytes(12).toString('hex');
    const argv = wrappedArgv(
      { ...env, [EXEC_ID_ENV]: tag },
      cwd,
      request.argv ?? ['/bin/sh', '-c', request.command!],
      'gym-exec',
    );
    const line = this.#driver.enter(host, target, argv, { tag, as });
    return superviseExec(request, options, {
      run: (output, stopped) =>
        host.connection.exec(line, {
          stdin: stdinBytes(request) ?? Buffer.alloc(0),
          signal: stopped,
          onStdout: (chunk) => output.push('stdout', chunk),
          onStderr: (chunk) => output.push('stderr', chunk),
        }),
      kill: () => this.#killTagged(host, id, target, tag),
      sandboxKilled: () => this.#driver.lost(id),
      classify: async ({ end: exit, error, timedOut, aborted }, output) => {
        if (timedOut || aborted) return output.result(timedOut ? 'timeout' : 'killed', null);
        if (exit === undefined && !isGymError(error, 'PROVIDER_UNAVAILABLE')) throw error;
        const ended = output.result('ok', exit?.code ?? null);
        const isGone =
          exit === undefined ||
          (exit.code === 255 && this.#driver.isGone(ended.stderr) && !(await this.fleet.exists(host, id)));
        const sigkilled =
          exit !== undefined && (exit.signal === 'SIGKILL' || exit.code === SIGKILL_EXIT_CODE);
        if (!isGone && !sigkilled && exit.signal === null && exit.code !== null) return ended;
        const end = isGone ? 'sandbox_gone' : await this.#driver.abnormalEnd(host, id, sigkilled);
        if (end === 'sandbox_gone') this.#driver.lost(id);
        return abnormalEndResult(output, end, sigkilled ? SIGKILL_EXIT_CODE : null);
      },
    });
  }

  /** A terminal: the runtime's entry into the sandbox on an SSH channel with a pty request. */
  async openPty(id: string, request: PtyOpenRequest, options: PtyOpenOptions): Promise<PtyChannel> {
    await this.#resumed();
    const host = await this.fleet.locate(id);
    const entry = await this.#entry(host, id, request.user, {
      env: request.env,
      ...(request.cwd === undefined ? {} : { cwd: request.cwd }),
    });
    if (entry === null)
      throw new GymError('SANDBOX_NOT_FOUND', `sandbox ${id} is gone`, { details: { sandboxId: id } });
    const tag = request.env[EXEC_ID_ENV];
    const argv = wrappedArgv(entry.env, entry.cwd, request.argv, 'gym-pty');
    const line = this.#driver.enter(host, entry.target, argv, {
      ...(tag === undefined ? {} : { tag }),
      as: entry.as,
    });
    const remote = await host.connection.start(line, {
      held: true,
      terminal: request.tty
        ? { rows: request.rows, cols: request.cols, term: request.env.TERM ?? 'xterm-256color' }
        : null,
      onStdout: (chunk) => options.onOutput('stdout', chunk),
      onStderr: (chunk) => options.onOutput('stderr', chunk),
    });
    return sshPtyChannel(remote, {
      tty: request.tty,
      isGone: async () => !(await this.fleet.exists(host, id)),
    });
  }

  /**
   * What entering sandbox `id` as `user` (else the spec's) takes: its target, the driver's user
   * flags, the environment and working directory (the request's over the spec's over the
   * image's); null when the sandbox is gone.
   */
  async #entry(
    host: FleetHost<H>,
    id: string,
    user: string | undefined,
    request: Partial<Pick<ExecRequest, 'env' | 'cwd'>> = {},
  ): Promise<Entry<Target> | null> {
    const { spec, imageConfig } = await this.fleet.record(host, id);
    const target = await this.#driver.target(host, id);
    if (target === null) return null;
    const effective = user ?? spec.user;
    return {
      target,
      as: effective === undefined ? [] : await this.#userFlags(id, effective),
      env: { PATH: DEFAULT_PATH, HOME: '/root', ...imageConfig?.env, ...spec.env, ...request.env },
      cwd: request.cwd ?? spec.workdir ?? imageConfig?.workdir ?? '/',
    };
  }

  /** The driver's entry flags for `user`; what the runtime cannot run as it throws for. */
  async #userFlags(id: string, user: string): Promise<string[]> {
    const { uid, gid } = await this.#files.resolveUser(id, user);
    return this.#driver.userFlags(uid, gid, user);
  }

  /** Kills the sandbox's processes carrying the tag from the host, in its pid namespace only (`killTaggedOnHost`). */
  #killTagged(
    host: FleetHost<H>,
    id: string,
    target: Target,
    tag: string,
    reach: KillReach = 'tagged-and-their-sessions',
  ): Promise<KillOutcome> {
    const warn = () =>
      this.#context.logger.warn(
        { sandboxId: id },
        'the timeout kill did not take effect; killing the sandbox',
      );
    const scope = () => this.#driver.killScope(host, target);
    return killTaggedOnHost((line) => this.fleet.run(host, line), host.busyboxPath, scope, tag, reach, warn);
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
      const entry = await this.#entry(host, id, user);
      if (entry === null) throw new GymError('SANDBOX_NOT_FOUND', `sandbox ${id} does not exist`);
      const { target, env, cwd, as } = entry;
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
    if (open !== undefined) return { url: loopbackGatewayUrl(open.port) };
    const port = recordedGatewayPort(options.url);
    const started = await this.#relays.open(id, async () => {
      const { host, target, execId, command } = await this.#relayCommand(id, String(port));
      const relay = await startSshRelay(
        host.connection,
        command,
        { label: `${host.name}/${this.#nameOf(id)}`, details: { sandboxId: id, host: host.name, port } },
        options.socketPath,
        this.#options.relayMaxConnections,
        this.#relayCounters,
      );
      return Object.assign(relay, { execId, host, target });
    });
    return { url: loopbackGatewayUrl(started.port) };
  }

  relayStats(): RelayStats {
    return relayStatsOf(this.#relays.openRelays, this.#relayCounters.refusedTotal);
  }

  /** The relay mounted at create, run in connect mode in the sandbox (its own loopback) over one SSH channel. */
  async openPortRelay(id: string): Promise<PortRelay> {
    if (this.capabilities.ports !== true)
      throw new GymError(
        'CAPABILITY_UNSUPPORTED',
        `ports need the relay, which is off for this ${this.#driver.runtime} provider (option gatewayReach, or no relay at ${this.#options.relayHelperPath})`,
        { details: { provider: this.name, capability: 'ports' } },
      );
    const { host, command } = await this.#relayCommand(id, 'connect');
    return PortRelay.start(sshRelayChannel(host.connection, command), {
      label: `${host.name}/${this.#nameOf(id)}`,
      details: { sandboxId: id, host: host.name },
    });
  }

  /** The command that runs the sandbox's relay with `mode` (a gateway port, or `connect`), tagged with a fresh exec id. */
  async #relayCommand(id: string, mode: string) {
    const { host, target } = await this.#target(id);
    if (!(await this.fleet.exists(host, id)))
      throw new GymError('SANDBOX_NOT_FOUND', `sandbox ${id} does not exist`);
    const execId = randomBytes(12).toString('hex');
    const argv = wrappedArgv(
      { PATH: DEFAULT_PATH, [EXEC_ID_ENV]: execId },
      '/',
      [RELAY_IN_SANDBOX, mode],
      'gym-relay',
    );
    return { host, target, execId, command: this.#driver.enter(host, target, argv, { tag: execId }) };
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
