/**
 * Apptainer over SSH: sandboxes are Apptainer instances on the hosts of an inventory (compute
 * nodes, or the nodes of a Slurm allocation), reached through a pool of SSH connections per
 * host (providers/ssh/). A daemon on a login node runs sandboxes on many compute nodes this way.
 *
 * - Placement: the reachable host with the most free slots (`maxSandboxes` minus its sandboxes).
 * - A sandbox is an instance `gym-<namespace>-<id>` started with `--no-privs --containall --cleanenv
 *   --writable-tmpfs --no-home --net --network none` from a sandbox-directory image under the
 *   host's `<workDirectory>/images/`, with the host's static busybox bound read-only at
 *   `/.gym-tools/busybox` for file transfers and kills that use none of the sandbox's programs.
 * - Images: `prepareImage` takes the builder's root filesystem (`rootfs`), keeps it in the
 *   daemon's state directory and unpacks it into a sandbox directory on every host that answers
 *   (`<workDirectory>/images/<reference>/`, with its config beside it); a host that lacks it gets
 *   it at its first create. The folder is named by the content-addressed reference, so it is
 *   copied to a host once, whichever daemon asks.
 * - The hosts, their connections, placement and the state file per sandbox are the shared
 *   HostFleet's (providers/ssh/host-fleet.ts); its state files are joined with `apptainer
 *   instance list --json`, so a reaper without the daemon's state still finds orphans; an
 *   instance without a state file is not ours. The host set can be replaced at runtime.
 * - Privileges: every exec into an instance (commands, session shells, the relay, file transfers)
 *   passes `--no-privs` too, since Apptainer gives root its default capabilities (all of them) again
 *   at each join; another user is `--security uid:N,gid:N`. So when the SSH user is root the agent
 *   is uid 0 on the node without capabilities, not root with all of them.
 * - Exec is `apptainer exec instance://NAME` over a fresh SSH channel. A timeout kills every
 *   process that carries the command's tag (`timeoutKill: tagged`: a process that clears its
 *   environment and leaves its session escapes it; Apptainer gives no cgroup of our own per
 *   command). A host that stops answering makes its commands `sandbox_gone` and its sandboxes
 *   `unreachable` in listings.
 * - Limits are Apptainer's `--memory`, `--memory-swap`, `--cpus` and `--pids-limit` (cgroups: root,
 *   or cgroups v2 delegated to the user); an OOM kill is told apart from another SIGKILL by the
 *   instance's cgroup counter, read on the host.
 * - Derived images (a base, files, a command: the swe-mini task images) are made on each host
 *   from the base's sandbox directory with `apptainer exec --writable`; the recipe is kept here
 *   for hosts that were down.
 * - Slurm mode (`slurm` instead of `hosts`): the hosts are the nodes of an allocation the provider
 *   holds (providers/ssh/slurm-hosts.ts), asked for at the first create, reached over SSH; when it
 *   ends its sandboxes are gone (and their instances stopped where the nodes still answer), and
 *   the next create asks for a new one.
 * - Sessions: one long-lived shell per session in the instance (`apptainer exec instance://NAME
 *   ... /bin/sh`) over one SSH channel held for the session's life (`../ssh/ssh-session.ts`, the
 *   protocol in `../shared/shell-session.ts`); a host's channels come from a pool of connections
 *   (`../ssh/pool.ts`), so many sessions pass sshd's MaxSessions per connection. A timeout kills
 *   the command's tagged processes, not the shell.
 * - Gateway reach: with `--network none` the instance's loopback is its own, so a forward on the
 *   host's loopback cannot reach it. The static relay (`.tools/gym-relay`, copied to each host
 *   once by content and bound read-only at `/.gym-tools/gym-relay`) runs in the instance over one
 *   SSH channel, listens on its loopback and frames each connection to the daemon, which joins
 *   it to the gateway socket and nothing else (`../shared/gateway-relay.ts`).
 * - Not here (yet): snapshot, SIF files, and commands as `srun --overlap` steps (Slurm mode
 *   reaches its nodes over SSH).
 */
import { randomBytes } from 'node:crypto';
import { createReadStream, createWriteStream, existsSync } from 'node:fs';
import { copyFile, mkdir, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join, posix } from 'node:path';
import { PassThrough, Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import * as tar from 'tar-stream';
import { z } from 'zod';
import { type ErrorCode, GymError, isGymError } from '../../core/errors.ts';
import type { ExecRequest, ExecResult } from '../../core/schemas/exec.ts';
import type { SandboxInfo, SandboxSpec } from '../../core/schemas/sandbox.ts';
import type {
  CreateOptions,
  DerivedImageSource,
  ExecOptions,
  FileContent,
  ImageConfig,
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
  classifyAbnormalEnd,
  OomKillCounts,
  type OutsideView,
  type SandboxLoss,
} from '../shared/abnormal-end.ts';
import { packSingleFile, readFileThroughLinks, rebaseArchive, spoolSafeArchive } from '../shared/archive.ts';
import {
  CommandCannotStart,
  cannotStartResult,
  markSandboxLost,
  parseOomKillCount,
  stdinBytes,
} from '../shared/exec-output.ts';
import { DEFAULT_RELAY_HELPER_PATH, type GatewayRelay, relayStatsOf } from '../shared/gateway-relay.ts';
import { guardedExtractArgs } from '../shared/guarded-extract.ts';
import { imageFolderName } from '../shared/image-folder.ts';
import {
  EXEC_ID_ENV,
  hostKillNamespaceArgv,
  hostKillScriptArgv,
  hostStopScriptArgv,
  KILL_FAILED_NOTE,
  KILL_FAILED_REASON,
  type KillOutcome,
  type KillReach,
} from '../shared/kill-script.ts';
import { OutputCapture } from '../shared/output-capture.ts';
import { waitUntilReady } from '../shared/readiness.ts';
import { shellJoin } from '../shared/shell.ts';
import type { ShellSession } from '../shared/shell-session.ts';
import {
  FleetConnectionFields,
  type FleetHost,
  HostFleet,
  HostSchema,
  type RemoteResult,
} from '../ssh/host-fleet.ts';
import { SlurmHosts, SlurmModeSchema } from '../ssh/slurm-hosts.ts';
import { openSshSession, startSshRelay } from '../ssh/ssh-session.ts';

const ApptainerHostSchema = HostSchema.extend({
  /** The apptainer command on the host. */
  apptainer: z.string().default('apptainer'),
}).strict();
type ApptainerHost = z.output<typeof ApptainerHostSchema>;

export const ApptainerOptionsSchema = z
  .object({
    /** The hosts; or, with `slurm`, none: the nodes of the allocation are the hosts. */
    hosts: z.array(ApptainerHostSchema).min(1).optional(),
    /** Slurm mode: hold an allocation and run the sandboxes on its nodes. */
    slurm: SlurmModeSchema.optional(),
    ...FleetConnectionFields,
    /** Gateway reach (`exposeGateway`) through the relay; off without the relay binary. */
    gatewayReach: z.boolean().default(true),
    /** The static relay copied to each host (built by scripts/setup.sh). */
    relayHelperPath: z.string().startsWith('/').default(DEFAULT_RELAY_HELPER_PATH),
    /** Open relay connections per sandbox at most; one more is closed at once. */
    relayMaxConnections: z.number().int().positive().max(4096).default(32),
  })
  .strict()
  .refine((options) => (options.hosts === undefined) !== (options.slurm === undefined), {
    message: 'give either hosts or slurm',
  });
export type ApptainerOptions = z.input<typeof ApptainerOptionsSchema>;

type Host = FleetHost<ApptainerHost>;

const TOOLS = '/.gym-tools/busybox';
/** Where the relay is bound in every instance made with gateway reach. */
const RELAY_IN_INSTANCE = '/.gym-tools/gym-relay';
const DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';
/**
 * On every `exec` into an instance, not only at its start: Apptainer works out root's capabilities
 * again at each join (from apptainer.conf's "root default capabilities", every one by default),
 * so an exec without it gives root's commands all of them even in an instance started with it.
 * A non-root user has none either way and the flag changes nothing for it.
 */
const UNPRIVILEGED = ['--no-privs'];

/** The files of a derived image as a tar, by their paths relative to its working directory. */
function packFiles(files: Record<string, string>): Readable {
  const pack = tar.pack();
  for (const [path, content] of Object.entries(files)) pack.entry({ name: path, mode: 0o644 }, content);
  pack.finalize();
  return Readable.from(pack as AsyncIterable<Buffer>);
}

const goneResult = (durationMs: number): ExecResult => ({
  status: 'sandbox_gone',
  exitCode: null,
  stdout: '',
  stderr: '',
  stdoutTruncated: false,
  stderrTruncated: false,
  stdoutBytes: 0,
  stderrBytes: 0,
  durationMs,
});

/** Apptainer's cgroup flags for the spec's limits (swap capped at the memory limit). */
function resourceFlags(spec: SandboxSpec): string[] {
  const resources = spec.resources ?? {};
  return [
    ...(resources.memoryMiB === undefined
      ? []
      : ['--memory', `${resources.memoryMiB}M`, '--memory-swap', `${resources.memoryMiB}M`]),
    ...(resources.cpus === undefined ? [] : ['--cpus', String(resources.cpus)]),
    ...(resources.pidsLimit === undefined ? [] : ['--pids-limit', String(resources.pidsLimit)]),
  ];
}

/**
 * Prints the OOM-kill counter of the cgroup that process $1 is in, read on the host (not from the
 * sandbox, whose files an agent may have replaced): cgroup v1's memory.oom_control or v2's
 * memory.events. Prints nothing when the process has no memory cgroup.
 */
const HOST_OOM_COUNTER = `
line=$(grep -E '(^0::|:memory:)' /proc/$1/cgroup 2>/dev/null | grep -E ':memory:' | head -1)
[ -n "$line" ] || line=$(grep -E '^0::' /proc/$1/cgroup 2>/dev/null | head -1)
path=\${line#*:*:}
if [ -f "/sys/fs/cgroup/memory$path/memory.oom_control" ]; then cat "/sys/fs/cgroup/memory$path/memory.oom_control"
elif [ -f "/sys/fs/cgroup$path/memory.events" ]; then cat "/sys/fs/cgroup$path/memory.events"; fi
true`;

/** What is kept beside an image's root filesystem, here and on each host. */
interface ImageRecord {
  reference: string;
  config: ImageConfig;
  createdAt: string;
}

export class ApptainerProvider implements SandboxProvider {
  readonly name: string = 'apptainer';
  readonly capabilities: ProviderCapabilities;
  readonly #context: ProviderContext;
  readonly #options: z.output<typeof ApptainerOptionsSchema>;
  /** Sessions by sandbox id, then by session name and user. */
  readonly #sessions = new Map<string, Map<string, Promise<ShellSession>>>();
  /** Gateway relays by sandbox id, with the exec id that tags each for the kill script. */
  readonly #relays = new Map<string, Promise<{ relay: GatewayRelay; execId: string; host: Host }>>();
  readonly #relayCounters = { refusedTotal: 0 };
  readonly #relayList = new Set<GatewayRelay>();
  /** The relay's path on each host (copied there once, by content), by host name. */
  /** The hosts, their connections, placement and the sandboxes' state files. */
  readonly fleet: HostFleet<ApptainerHost>;
  readonly #oomKills = new OomKillCounts();
  /** Slurm mode: the allocation whose nodes are the fleet's hosts. */
  readonly slurm: SlurmHosts | null = null;

  constructor(options: unknown, context: ProviderContext) {
    const parsed = ApptainerOptionsSchema.parse(options);
    this.#context = context;
    this.#options = parsed;
    this.capabilities = {
      sessions: true,
      snapshot: false,
      gpus: false,
      diskLimit: false,
      networkModes: ['none'],
      gatewayReach: parsed.gatewayReach && existsSync(parsed.relayHelperPath),
      timeoutKill: 'tagged',
      stopProcesses: true,
      imageFormats: ['rootfs', 'derived'],
    };
    this.fleet = this.#fleet(parsed.hosts ?? [], parsed);
    if (parsed.slurm !== undefined)
      this.slurm = new SlurmHosts(parsed.slurm, {
        logger: context.logger,
        namespace: context.namespace,
        checkHost: (host) => ApptainerHostSchema.parse(host),
        setHosts: (hosts) => this.setHosts(hosts),
        list: () => this.fleet.list(),
        reap: (hosts) =>
          this.#reap(z.array(ApptainerHostSchema).parse(hosts), parsed, this.#context.clock.now()),
      });
  }

  #fleet(
    hosts: ApptainerHost[],
    connection: z.output<typeof ApptainerOptionsSchema>,
  ): HostFleet<ApptainerHost> {
    return new HostFleet({
      runtime: 'apptainer',
      namespace: this.#context.namespace,
      logger: this.#context.logger,
      connection,
      hosts,
      liveNames: (host) => this.#liveInstances(host),
      nameOf: (id) => this.#instanceName(id),
    });
  }

  /**
   * Stops our instances (and removes their state files) on hosts that left with an ended Slurm
   * allocation, over connections of their own: without pam_slurm_adopt, what was started over SSH
   * outlives the job. A node that no longer lets us in (pam_slurm_adopt: the job's end killed
   * them) is passed over. Sandboxes created after `endedAt` are spared: they belong to the next
   * allocation, which may have the same nodes.
   */
  async #reap(
    hosts: ApptainerHost[],
    connection: z.output<typeof ApptainerOptionsSchema>,
    endedAt: number,
  ): Promise<void> {
    const fleet = this.#fleet(hosts, connection);
    try {
      await Promise.all(
        fleet.hosts.map(async (host) => {
          const sandboxes = await fleet.listHost(host).catch(() => []);
          for (const info of sandboxes)
            if (Date.parse(info.createdAt) <= endedAt)
              await fleet.run(host, this.#stopLine(host, info.id)).catch(() => {});
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

  /** The names of the apptainer instances running on a host. Throws when it does not answer. */
  async #liveInstances(host: Host): Promise<Set<string>> {
    const instances = await this.#run(host, this.#apptainer(host, ['instance', 'list', '--json']));
    if (instances.code !== 0)
      throw new GymError(
        'PROVIDER_ERROR',
        `apptainer instance list failed on ${host.name}: ${instances.stderr.trim()}`,
      );
    return new Set(
      (
        (JSON.parse(instances.stdout.toString()) as { instances: Array<{ instance: string }> }).instances ??
        []
      ).map((entry) => entry.instance),
    );
  }

  /**
   * Replaces the hosts (the nodes of a Slurm allocation, say): a host that leaves takes its
   * sandboxes out of reach (gone from listings, their commands `sandbox_gone`); new hosts take creates.
   */
  setHosts(hosts: unknown): void {
    this.fleet.setHosts(z.array(ApptainerHostSchema).parse(hosts));
  }

  #instanceName(id: string): string {
    return `gym-${this.#context.namespace}-${id}`;
  }

  /** `env K=V ... apptainer ARGS` as one shell line for the host. */
  #apptainer(host: Host, args: string[]): string {
    const env = Object.entries(host.env).map(([key, value]) => `${key}=${value}`);
    return shellJoin(['env', ...env, host.apptainer, ...args]);
  }

  #run(host: Host, command: string, stdin?: Buffer | Readable): Promise<RemoteResult> {
    return this.fleet.run(host, command, stdin);
  }

  async health(): Promise<ProviderHealth> {
    if (this.slurm === null) return this.fleet.health((host) => this.#apptainer(host, ['--version']));
    const slurm = await this.slurm.health();
    if (!slurm.ok || this.fleet.hosts.length === 0) return slurm;
    const hosts = await this.fleet.health((host) => this.#apptainer(host, ['--version']));
    return { ...hosts, details: { ...hosts.details, slurm: slurm.details } };
  }

  async create(spec: SandboxSpec, options: CreateOptions = {}): Promise<SandboxInfo> {
    if (spec.resources?.gpus)
      throw new GymError('CAPABILITY_UNSUPPORTED', 'the apptainer provider has no gpus yet');
    if (spec.resources?.diskMiB !== undefined)
      throw new GymError('CAPABILITY_UNSUPPORTED', 'the apptainer provider cannot limit disk use');
    if (spec.network !== 'none')
      throw new GymError(
        'CAPABILITY_UNSUPPORTED',
        `the apptainer provider has no network mode ${spec.network}`,
      );
    const unpin = this.slurm === null ? () => {} : await this.slurm.ensure();
    try {
      return await this.#createOnFleet(spec, options);
    } finally {
      unpin();
    }
  }

  async #createOnFleet(spec: SandboxSpec, options: CreateOptions): Promise<SandboxInfo> {
    const host = await this.fleet.pick();
    const image = this.#imagePath(host, spec.image);
    const imageConfig = await this.#ensureImage(host, spec.image);
    const relay = this.capabilities.gatewayReach
      ? await this.fleet.placeRelay(host, this.#options.relayHelperPath)
      : null;
    const id = options.id ?? `sbx-${randomBytes(8).toString('hex')}`;
    const now = this.#context.clock.now();
    const info: SandboxInfo = {
      id,
      provider: this.name,
      state: 'ready',
      image: spec.image,
      labels: spec.labels,
      namespace: this.#context.namespace,
      daemonId: this.#context.daemonId,
      pool: options.pool ?? null,
      createdAt: new Date(now).toISOString(),
      leaseExpiresAt: new Date(now + spec.ttlSeconds * 1000).toISOString(),
      deadlineAt: new Date(now + this.#context.maxLifetimeSeconds * 1000).toISOString(),
      providerRef: `${host.name}/${this.#instanceName(id)}`,
      scope: host.name,
    };
    this.fleet.place(id, host);
    this.#oomKills.start(id);
    const statePath = this.fleet.statePath(host, id);
    try {
      // The state file first: a crash after it leaves a record a reaper can act on.
      await this.fleet.writeRecord(host, id, { info, spec, imageConfig });
      // Start's own stdio goes to /dev/null: the instance inherits it and would hold the channel open.
      const started = await this.#run(
        host,
        `cd / && ${this.#apptainer(host, [
          'instance',
          'start',
          // Root's default in apptainer.conf is every capability; a non-root user has none anyway.
          '--no-privs',
          '--containall',
          '--cleanenv',
          '--writable-tmpfs',
          '--no-home',
          '--net',
          '--network',
          'none',
          '--bind',
          `${host.busyboxPath}:${TOOLS}:ro`,
          ...(relay === null ? [] : ['--bind', `${relay}:${RELAY_IN_INSTANCE}:ro`]),
          ...resourceFlags(spec),
          image,
          this.#instanceName(id),
        ])} </dev/null >/dev/null 2>${shellJoin([`${statePath}.start-error`])}; code=$?; cat ${shellJoin([`${statePath}.start-error`])} >&2; rm -f ${shellJoin([`${statePath}.start-error`])}; exit $code`,
      );
      if (started.code !== 0)
        throw new GymError(
          'SANDBOX_START_FAILED',
          `apptainer instance start failed on ${host.name}: ${started.stderr.trim()}`,
        );
      if (spec.user !== undefined) await this.#resolveUser(id, spec.user);
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

  /**
   * `apptainer exec` of argv in the sandbox, through the bound busybox's `env` so values pass
   * exactly; `as` is `--security uid:N,gid:N` for another user (see #userFlags).
   */
  #execLine(
    host: Host,
    id: string,
    argv: string[],
    env: Record<string, string>,
    cwd: string,
    as: string[] = [],
  ): string {
    const tag = env[EXEC_ID_ENV];
    return this.#apptainer(host, [
      'exec',
      ...UNPRIVILEGED,
      ...as,
      '--cleanenv',
      // Tagged from its first process: one the agent stops before `env` ran is still killed.
      ...(tag === undefined ? [] : ['--env', `${EXEC_ID_ENV}=${tag}`]),
      '--pwd',
      '/',
      `instance://${this.#instanceName(id)}`,
      TOOLS,
      'env',
      '-i',
      ...Object.entries(env).map(([key, value]) => `${key}=${value}`),
      // The bound shell enters the working directory: one the sandbox lacks is then a shell's
      // 126 with its message, where Apptainer's own `--pwd` fails as it fails for anything (255).
      TOOLS,
      'sh',
      '-c',
      'cd "$1" || exit 126; shift; exec "$@"',
      'gym-exec',
      cwd,
      ...argv,
    ]);
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
    if (request.session !== undefined) {
      let session: ShellSession;
      try {
        session = await this.#session(host, id, request.session, request.user);
      } catch (error) {
        // The host does not answer (or left the set): as for a one-shot command.
        if (isGymError(error, 'PROVIDER_UNAVAILABLE')) return goneResult(0);
        throw error;
      }
      return session.run(request, options, {
        classifyAbnormalEnd: () =>
          classifyAbnormalEnd(id, this.#oomKills, {
            outsideView: () => this.#outsideView(host, id),
            probe: async () => null,
          }),
      });
    }
    const started = Date.now();
    let spec: SandboxSpec;
    let imageConfig: ImageConfig | undefined;
    try {
      ({ spec, imageConfig } = await this.fleet.record(host, id));
    } catch (error) {
      // The host does not answer: its sandboxes are out of reach, as good as gone for a command.
      if (isGymError(error, 'PROVIDER_UNAVAILABLE')) return goneResult(Date.now() - started);
      throw error;
    }
    const user = request.user ?? spec.user;
    const as = user === undefined ? [] : await this.#userFlags(id, user);
    const tag = randomBytes(12).toString('hex');
    const env = {
      PATH: DEFAULT_PATH,
      HOME: '/root',
      ...imageConfig?.env,
      ...spec.env,
      ...request.env,
      GYM_EXEC_ID: tag,
    };
    const argv = request.argv ?? ['/bin/sh', '-c', request.command!];
    const line = this.#execLine(
      host,
      id,
      argv,
      env,
      request.cwd ?? spec.workdir ?? imageConfig?.workdir ?? '/',
      as,
    );
    const stdout = new OutputCapture(request.maxOutputBytes);
    const stderr = new OutputCapture(request.maxOutputBytes);
    const abort = new AbortController();
    let timedOut = false;
    let killing: Promise<KillOutcome> | null = null;
    const kill = () => {
      killing ??= this.#killTagged(host, id, tag);
      void killing.finally(() => abort.abort());
    };
    const timer = setTimeout(() => {
      timedOut = true;
      kill();
    }, request.timeoutMs);
    const stop = () => kill();
    options.signal?.addEventListener('abort', stop, { once: true });
    const input = stdinBytes(request);
    let exit: { code: number | null; signal: string | null } | null = null;
    let lost: GymError | null = null;
    try {
      exit = await host.connection.exec(line, {
        stdin: input ?? Buffer.alloc(0),
        signal: abort.signal,
        onStdout: (chunk) => {
          stdout.push(chunk);
          options.onOutput?.('stdout', chunk);
        },
        onStderr: (chunk) => {
          stderr.push(chunk);
          options.onOutput?.('stderr', chunk);
        },
      });
    } catch (error) {
      if (!isGymError(error, 'PROVIDER_UNAVAILABLE') || timedOut) {
        if (!timedOut) throw error;
      } else lost = error;
    } finally {
      clearTimeout(timer);
      options.signal?.removeEventListener('abort', stop);
    }
    const stderrText = stderr.toBuffer().toString('utf8');
    const gone =
      lost !== null ||
      (exit?.code === 255 && /no instance found/.test(stderrText) && !(await this.fleet.exists(host, id)));
    let status: ExecResult['status'] = timedOut ? 'timeout' : gone ? 'sandbox_gone' : 'ok';
    const sigkilled = exit !== null && (exit.signal === 'SIGKILL' || exit.code === 137);
    let loss: SandboxLoss | null = null;
    if (status === 'ok' && sigkilled) {
      const end = await classifyAbnormalEnd(id, this.#oomKills, {
        outsideView: () => this.#outsideView(host, id),
        probe: async () => null,
      });
      if (typeof end === 'object') loss = end;
      else status = end;
    } else if (status === 'ok' && (exit?.signal != null || exit?.code === null)) status = 'killed';
    const result: ExecResult = {
      status,
      exitCode:
        status === 'ok'
          ? (exit?.code ?? null)
          : status === 'killed' || status === 'oom'
            ? sigkilled
              ? 137
              : null
            : null,
      stdout: stdout.toBuffer().toString('utf8'),
      stderr: stderrText,
      stdoutTruncated: stdout.isTruncated,
      stderrTruncated: stderr.isTruncated,
      stdoutBytes: stdout.totalBytes,
      stderrBytes: stderr.totalBytes,
      durationMs: Date.now() - started,
    };
    if (killing !== null && (await killing) === 'sandbox_killed') {
      return markSandboxLost(
        { ...result, stderr: `${result.stderr}${KILL_FAILED_NOTE.toString()}` },
        timedOut ? 'timeout' : 'killed',
        KILL_FAILED_REASON,
      );
    }
    return loss === null ? result : markSandboxLost(result, loss.lost, loss.reason);
  }

  /** The instance seen from its host: whether its keeper runs, and its cgroup's OOM kills. */
  async #outsideView(host: Host, id: string): Promise<OutsideView | null> {
    const listed = await this.#run(host, this.#apptainer(host, ['instance', 'list', '--json']));
    if (listed.code !== 0) return null;
    const entry = (
      JSON.parse(listed.stdout.toString()) as { instances: Array<{ instance: string; pid: number }> }
    ).instances.find((instance) => instance.instance === this.#instanceName(id));
    if (entry === undefined) return { isAlive: false, oomKills: null };
    const counter = await this.#run(host, `sh -c ${shellJoin([HOST_OOM_COUNTER])} oom ${entry.pid}`);
    return { isAlive: true, oomKills: parseOomKillCount(counter.stdout.toString()) };
  }

  /** The uid and gid a `user` names: numbers, `uid:gid`, or a name in the sandbox's /etc/passwd. */
  async #resolveUser(id: string, user: string): Promise<{ uid: number; gid: number }> {
    const [name = '', group] = user.split(':');
    let uid = /^\d+$/.test(name) ? Number(name) : Number.NaN;
    let gid = group !== undefined && /^\d+$/.test(group) ? Number(group) : Number.NaN;
    if (Number.isNaN(uid)) {
      const passwd = await this.#tools(id, ['cat', '/etc/passwd']);
      const entry = passwd.stdout
        .toString()
        .split('\n')
        .map((line) => line.split(':'))
        .find((fields) => fields[0] === name);
      if (entry === undefined) throw new CommandCannotStart(`no user ${name} in the sandbox's /etc/passwd`);
      uid = Number(entry[2]);
      if (group === undefined) gid = Number(entry[3]);
    }
    if (Number.isNaN(gid)) gid = uid;
    return { uid, gid };
  }

  /**
   * The exec flags that run a command as `user`: Apptainer's `--security uid:N,gid:N` (the gid is
   * the only group; no capabilities). A setuid call inside the instance cannot do it: under
   * `--no-privs` root there has no CAP_SETUID. Empty for root.
   */
  async #userFlags(id: string, user: string): Promise<string[]> {
    const { uid, gid } = await this.#resolveUser(id, user);
    return uid === 0 && gid === 0 ? [] : ['--security', `uid:${uid},gid:${gid}`];
  }

  #imagePath(host: Host, reference: string): string {
    return posix.join(host.workDirectory, 'images', imageFolderName(reference));
  }

  /** Where this daemon keeps the root filesystems it prepared, to copy them to a host that lacks one. */
  #cachePath(reference: string): string {
    return join(this.#context.stateDirectory, 'images', imageFolderName(reference));
  }

  /**
   * Makes sure `reference` is on the host, copying it there from this daemon's cache when it is
   * not (once per host: the folder is named by the content-addressed reference, so a second
   * create or a second daemon finds it); returns its config. IMAGE_NOT_FOUND when neither has it.
   */
  async #ensureImage(host: Host, reference: string): Promise<ImageConfig> {
    const target = this.#imagePath(host, reference);
    const present = await this.#run(
      host,
      `test -d ${shellJoin([target])} && { cat ${shellJoin([`${target}.image.json`])} 2>/dev/null; true; }`,
    );
    if (present.code !== 0) {
      const recipe = await readFile(`${this.#cachePath(reference)}.derived.json`, 'utf8').catch(() => null);
      if (recipe !== null) return this.#buildDerived(host, JSON.parse(recipe) as DerivedImageSource);
      const cached = await readFile(`${this.#cachePath(reference)}.image.json`, 'utf8').catch(() => null);
      if (cached === null)
        throw new GymError(
          'IMAGE_NOT_FOUND',
          `image ${reference} is not on host ${host.name} (no ${target}) and this daemon has not prepared it (gym image build)`,
          { details: { image: reference, host: host.name } },
        );
      await this.#upload(host, reference, JSON.parse(cached) as ImageRecord);
      return (JSON.parse(cached) as ImageRecord).config;
    }
    const text = present.stdout.toString().trim();
    return text === '' ? { env: {}, labels: {} } : (JSON.parse(text) as ImageRecord).config;
  }

  /** Copies a cached root filesystem to a host: unpacked beside, then renamed into place. */
  async #upload(host: Host, reference: string, record: ImageRecord): Promise<void> {
    const target = this.#imagePath(host, reference);
    const partial = `${target}.partial-${randomBytes(4).toString('hex')}`;
    const unpacked = await this.#run(
      host,
      `mkdir -p ${shellJoin([partial])} && tar -x --numeric-owner -C ${shellJoin([partial])} && { [ -d ${shellJoin([target])} ] && rm -rf ${shellJoin([partial])} || mv ${shellJoin([partial])} ${shellJoin([target])}; }`,
      createReadStream(`${this.#cachePath(reference)}.tar`),
    );
    if (unpacked.code !== 0) {
      await this.#run(host, `rm -rf ${shellJoin([partial])}`).catch(() => {});
      throw new GymError(
        'PROVIDER_ERROR',
        `copying image ${reference} to ${host.name} failed: ${unpacked.stderr.trim()}`,
      );
    }
    const saved = await this.#run(
      host,
      `cat > ${shellJoin([`${target}.image.json`])}`,
      Buffer.from(JSON.stringify(record)),
    );
    if (saved.code !== 0)
      throw new GymError('PROVIDER_ERROR', `writing ${target}.image.json failed: ${saved.stderr.trim()}`);
    this.imageCopies += 1;
  }

  /** How many times a root filesystem was copied to a host (tests count it). */
  imageCopies = 0;

  /**
   * Makes a derived image on a host: a copy of the base's sandbox directory, the files written
   * into the working directory, the command run there (contained, no network, no privileges) with
   * `apptainer exec --no-privs --writable`, then renamed into place with its config. Returns that
   * config.
   */
  async #buildDerived(host: Host, source: DerivedImageSource): Promise<ImageConfig> {
    const baseConfig = await this.#ensureImage(host, source.base);
    const config: ImageConfig = {
      env: baseConfig.env,
      workdir: source.workdir,
      ...(baseConfig.cmd === undefined ? {} : { cmd: baseConfig.cmd }),
      labels: { ...baseConfig.labels, ...source.labels },
    };
    const target = this.#imagePath(host, source.reference);
    const partial = `${target}.partial-${randomBytes(4).toString('hex')}`;
    const inside = posix.join(partial, source.workdir);
    const fail = async (why: string, code: ErrorCode = 'PROVIDER_ERROR'): Promise<never> => {
      await this.#run(host, `rm -rf ${shellJoin([partial])}`).catch(() => {});
      throw new GymError(code, `making image ${source.reference} on ${host.name}: ${why}`);
    };
    const copied = await this.#run(
      host,
      `cp -a ${shellJoin([this.#imagePath(host, source.base)])} ${shellJoin([partial])} && mkdir -p ${shellJoin([inside])} && tar -x --no-same-owner -C ${shellJoin([inside])}`,
      packFiles(source.files),
    );
    if (copied.code !== 0)
      await fail(`copying the base or writing the files failed: ${copied.stderr.trim()}`);
    let output = '';
    const keep = (chunk: Buffer) => {
      output = (output + chunk.toString()).slice(-4000);
    };
    const ran = await host.connection.exec(
      this.#apptainer(host, [
        'exec',
        // The recipe is a task's, not ours: no more privileges than an agent's command.
        ...UNPRIVILEGED,
        '--writable',
        '--containall',
        '--net',
        '--network',
        'none',
        '--pwd',
        source.workdir,
        '--bind',
        `${host.busyboxPath}:${TOOLS}:ro`,
        partial,
        TOOLS,
        'env',
        '-i',
        `PATH=${DEFAULT_PATH}`,
        'HOME=/root',
        ...Object.entries({ ...baseConfig.env, ...source.env }).map(([key, value]) => `${key}=${value}`),
        '/bin/sh',
        '-c',
        source.command,
      ]),
      { onStdout: keep, onStderr: keep },
    );
    if (ran.code !== 0)
      await fail(`the command failed (exit ${ran.code ?? ran.signal}): ${output}`, 'VALIDATION_FAILED');
    const record: ImageRecord = {
      reference: source.reference,
      config,
      createdAt: new Date(this.#context.clock.now()).toISOString(),
    };
    const [from, to] = [`${partial}.image.json`, `${target}.image.json`];
    const placed = await this.#run(
      host,
      `cat > ${shellJoin([from])} && if [ -d ${shellJoin([target])} ]; then rm -rf ${shellJoin([partial, from])}; else mv ${shellJoin([partial, target])} && mv ${shellJoin([from, to])}; fi`,
      Buffer.from(JSON.stringify(record)),
    );
    if (placed.code !== 0) await fail(`putting it in place failed: ${placed.stderr.trim()}`);
    this.imageBuilds += 1;
    return config;
  }

  /** How many derived images were made on a host (tests count it). */
  imageBuilds = 0;

  async #prepareDerived(source: DerivedImageSource): Promise<void> {
    // In Slurm mode it is made on the allocation's nodes: one is asked for when none is held.
    const unpin = this.slurm === null ? () => {} : await this.slurm.ensure();
    try {
      await this.#prepareDerivedOnFleet(source);
    } finally {
      unpin();
    }
  }

  async #prepareDerivedOnFleet(source: DerivedImageSource): Promise<void> {
    await mkdir(join(this.#context.stateDirectory, 'images'), { recursive: true, mode: 0o700 });
    const built = await Promise.all(
      this.fleet.hosts.map(async (host) => {
        const has = await this.#run(
          host,
          `test -d ${shellJoin([this.#imagePath(host, source.reference)])}`,
        ).catch(() => null);
        if (has === null) return null;
        return has.code === 0 ? this.#ensureImage(host, source.reference) : this.#buildDerived(host, source);
      }),
    );
    const config = built.find((entry) => entry !== null);
    if (config === undefined) throw new GymError('PROVIDER_UNAVAILABLE', 'no apptainer host answers');
    // The recipe is kept here, so a host that is down now makes the image at its first create.
    await writeFile(`${this.#cachePath(source.reference)}.derived.json`, JSON.stringify(source), {
      mode: 0o600,
    });
    const record: ImageRecord = {
      reference: source.reference,
      config,
      createdAt: new Date(this.#context.clock.now()).toISOString(),
    };
    await writeFile(`${this.#cachePath(source.reference)}.image.json`, JSON.stringify(record), {
      mode: 0o600,
    });
  }

  async prepareImage(source: ImageSource): Promise<void> {
    if (source.format === 'derived') return this.#prepareDerived(source);
    if (source.format !== 'rootfs')
      throw new GymError(
        'CAPABILITY_UNSUPPORTED',
        `the apptainer provider prepares no ${source.format} images`,
        {
          details: { provider: 'apptainer', capability: 'imageFormats' },
        },
      );
    // Kept here, so a host that is down now, or added later, gets the image at its first create.
    const cache = this.#cachePath(source.reference);
    await mkdir(join(this.#context.stateDirectory, 'images'), { recursive: true, mode: 0o700 });
    const partial = `${cache}.tar.partial-${randomBytes(4).toString('hex')}`;
    try {
      await pipeline(source.rootfs, createWriteStream(partial, { mode: 0o600 }));
      await rename(partial, `${cache}.tar`);
    } catch (error) {
      await rm(partial, { force: true });
      throw error;
    }
    const createdAt = new Date(this.#context.clock.now()).toISOString();
    const references = [source.reference, ...(source.aliases ?? [])];
    for (const reference of references) {
      const record: ImageRecord = { reference, config: source.config, createdAt };
      if (reference !== source.reference) await copyFile(`${cache}.tar`, `${this.#cachePath(reference)}.tar`);
      await writeFile(`${this.#cachePath(reference)}.image.json`, JSON.stringify(record), { mode: 0o600 });
    }
    // Copied to every host that answers now; a host that does not gets it at its first create.
    await Promise.all(
      this.fleet.hosts.map(async (host) => {
        for (const reference of references) {
          const has = await this.#run(host, `test -d ${shellJoin([this.#imagePath(host, reference)])}`).catch(
            () => null,
          );
          if (has === null || has.code === 0) continue;
          await this.#upload(host, reference, { reference, config: source.config, createdAt });
        }
      }),
    );
  }

  async inspectImage(reference: string): Promise<ImageInfo | null> {
    const cached = await readFile(`${this.#cachePath(reference)}.image.json`, 'utf8').catch(() => null);
    if (cached !== null) {
      const record = JSON.parse(cached) as ImageRecord;
      return { reference, labels: record.config.labels, createdAt: record.createdAt };
    }
    // An image an operator (or another daemon) put on a host is one too.
    for (const host of this.fleet.hosts) {
      const target = this.#imagePath(host, reference);
      const found = await this.#run(
        host,
        `test -d ${shellJoin([target])} && { cat ${shellJoin([`${target}.image.json`])} 2>/dev/null; true; }`,
      ).catch(() => null);
      if (found === null || found.code !== 0) continue;
      const text = found.stdout.toString().trim();
      const record = text === '' ? null : (JSON.parse(text) as ImageRecord);
      return {
        reference,
        labels: record?.config.labels ?? {},
        ...(record ? { createdAt: record.createdAt } : {}),
      };
    }
    return null;
  }

  async listImages(filter: ImageFilter = {}): Promise<ImageInfo[]> {
    const directory = join(this.#context.stateDirectory, 'images');
    const names = await readdir(directory).catch(() => [] as string[]);
    const images: ImageInfo[] = [];
    for (const name of names.filter((item) => item.endsWith('.image.json'))) {
      const record = JSON.parse(await readFile(join(directory, name), 'utf8')) as ImageRecord;
      if ((filter.labelKeys ?? []).every((key) => key in record.config.labels))
        images.push({
          reference: record.reference,
          labels: record.config.labels,
          createdAt: record.createdAt,
        });
    }
    return images.sort((left, right) => right.createdAt!.localeCompare(left.createdAt!));
  }

  /**
   * Kills every process of the sandbox carrying the tag, from the host (the host's busybox over
   * the host's /proc, only in the instance's pid namespace): a kill script inside the instance
   * runs as the agent's user, and the agent could stop it before it killed anything, so that the
   * command, its exec and their SSH channels never ended.
   */
  async #killTagged(
    host: Host,
    id: string,
    tag: string,
    reach: KillReach = 'tagged-and-their-sessions',
  ): Promise<KillOutcome> {
    try {
      const pid = await this.#instancePid(host, id);
      if (pid === null) return 'killed';
      const namespace = `/proc/${pid}/ns/pid_for_children`;
      const ran = await this.#run(
        host,
        shellJoin(hostKillScriptArgv(host.busyboxPath, namespace, tag, reach)),
      );
      if (ran.code === 0) return 'killed';
      // It gave up (a fork loop outran its passes): the instance's namespace goes whole, which
      // no fork outruns; resisting its kill cost the command its sandbox.
      this.#context.logger.warn(
        { sandboxId: id },
        'the timeout kill did not take effect; killing the instance',
      );
      await this.#run(host, shellJoin(hostKillNamespaceArgv(host.busyboxPath, namespace)));
      return 'sandbox_killed';
    } catch {
      // A host that does not answer: its commands end as it does.
      return 'killed';
    }
  }

  /** The host pid of a sandbox's instance (its init, in the instance's pid namespace); null when it runs none. */
  async #instancePid(host: Host, id: string): Promise<number | null> {
    const listed = await this.#run(host, this.#apptainer(host, ['instance', 'list', '--json']));
    if (listed.code !== 0) return null;
    const entry = (
      JSON.parse(listed.stdout.toString()) as { instances: Array<{ instance: string; pid: number }> }
    ).instances.find((instance) => instance.instance === this.#instanceName(id));
    return entry !== undefined && Number.isSafeInteger(entry.pid) && entry.pid > 0 ? entry.pid : null;
  }

  async stopProcesses(id: string): Promise<{ killed: number }> {
    await this.#resumed();
    const host = await this.fleet.locate(id);
    // Session shells and the relay are among the processes killed: dropped first, started again on use.
    this.#closeSessions(id);
    await this.#releaseRelay(id, false);
    // Every process of the instance but its first (the keeper), from the host: a script inside
    // would run as the agent's user, which could stop it.
    const pid = await this.#instancePid(host, id);
    if (pid === null)
      throw new GymError('PROVIDER_ERROR', `stopping processes of ${id}: its instance is not running`);
    const result = await this.#run(
      host,
      shellJoin(hostStopScriptArgv(host.busyboxPath, `/proc/${pid}/ns/pid`, pid)),
    );
    if (result.code !== 0)
      throw new GymError('PROVIDER_ERROR', `stopping processes of ${id}: ${result.stderr.trim()}`);
    return { killed: Number(result.stdout.toString().trim()) || 0 };
  }

  async #tools(id: string, args: string[], stdin?: Readable): Promise<RemoteResult> {
    await this.#resumed();
    const host = await this.fleet.locate(id);
    return this.#run(
      host,
      this.#apptainer(host, [
        'exec',
        ...UNPRIVILEGED,
        '--cleanenv',
        `instance://${this.#instanceName(id)}`,
        TOOLS,
        ...args,
      ]),
      stdin,
    );
  }

  async #extract(
    id: string,
    directories: Iterable<string>,
    archive: Readable,
    target: string,
  ): Promise<void> {
    const result = await this.#tools(id, guardedExtractArgs(TOOLS, directories), archive);
    if (result.code === 255 && /no instance found/.test(result.stderr))
      throw new GymError('SANDBOX_NOT_FOUND', `sandbox ${id} does not exist`);
    if (result.code !== 0)
      throw new GymError('PATH_KIND_MISMATCH', `cannot write ${target}: ${result.stderr.trim()}`);
  }

  async writeFile(
    id: string,
    path: string,
    content: FileContent,
    options: WriteFileOptions = {},
  ): Promise<void> {
    const normalized = posix.normalize(path);
    if (normalized === '/') throw new GymError('PATH_KIND_MISMATCH', 'cannot write a file at /');
    await this.#extract(
      id,
      [posix.dirname(normalized)],
      packSingleFile(normalized.slice(1), content, options.mode ?? 0o644),
      path,
    );
  }

  async #archive(id: string, path: string): Promise<Readable> {
    const result = await this.#tools(id, [
      'tar',
      '-c',
      '-f',
      '-',
      '-C',
      posix.dirname(path),
      posix.basename(path) || '.',
    ]);
    if (result.code === 255 && /no instance found/.test(result.stderr))
      throw new GymError('SANDBOX_NOT_FOUND', `sandbox ${id} does not exist`);
    if (result.code !== 0) {
      if (/no such file|not found/i.test(result.stderr))
        throw new GymError('FILE_NOT_FOUND', `${path} does not exist in sandbox ${id}`, {
          details: { sandboxId: id, path },
        });
      throw new GymError('PROVIDER_ERROR', `reading ${path}: ${result.stderr.trim()}`);
    }
    const stream = new PassThrough();
    stream.end(result.stdout);
    return stream;
  }

  async readFile(id: string, path: string): Promise<Readable> {
    return readFileThroughLinks(path, (current) => this.#archive(id, current));
  }

  async writeArchive(id: string, directory: string, archive: Readable): Promise<void> {
    await this.#resumed();
    await this.fleet.locate(id);
    const spooled = await spoolSafeArchive(archive, directory);
    try {
      await this.#extract(id, [directory, ...spooled.directories], spooled.open(), directory);
    } finally {
      await spooled.dispose();
    }
  }

  async readArchive(id: string, directory: string): Promise<Readable> {
    return rebaseArchive(await this.#archive(id, posix.normalize(directory)));
  }

  /** Stops a sandbox's instance and removes its state file. */
  #stopLine(host: Host, id: string): string {
    return `${this.#apptainer(host, ['instance', 'stop', '--force', this.#instanceName(id)])} >/dev/null 2>&1; rm -f ${shellJoin([this.fleet.statePath(host, id)])}`;
  }

  async destroy(id: string): Promise<void> {
    await this.#resumed();
    this.#closeSessions(id);
    await this.#releaseRelay(id, false);
    const host = await this.fleet.hostToDestroy(id);
    if (host === null) {
      this.#oomKills.forget(id);
      return;
    }
    await this.#run(host, this.#stopLine(host, id));
    this.fleet.forget(id);
    this.#oomKills.forget(id);
  }

  /**
   * The session shell `name` for `user` in the sandbox, opened on first use (and again after it
   * was lost): the image's `/bin/sh` through `apptainer exec`, with the sandbox's env and working
   * directory, as `user` (as a one-shot command's would be).
   */
  async #session(host: Host, id: string, name: string, user: string | undefined): Promise<ShellSession> {
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
    const sessions = byName;
    const opening = (async () => {
      const { spec, imageConfig } = await this.fleet.record(host, id);
      const effective = user ?? spec.user;
      const as = effective === undefined ? [] : await this.#userFlags(id, effective);
      const env = { PATH: DEFAULT_PATH, HOME: '/root', ...imageConfig?.env, ...spec.env };
      const line = this.#execLine(
        host,
        id,
        ['/bin/sh'],
        env,
        spec.workdir ?? imageConfig?.workdir ?? '/',
        as,
      );
      // Only the command's processes: the shell shares their session. From the host, out of
      // the agent's reach: a failed pass is not escalated to the sandbox (yet).
      return openSshSession(host.connection, line, (execId) =>
        this.#killTagged(host, id, execId, 'tagged-only'),
      );
    })();
    sessions.set(key, opening);
    opening.catch(() => sessions.delete(key));
    return opening;
  }

  #closeSessions(id: string): void {
    const byName = this.#sessions.get(id);
    this.#sessions.delete(id);
    for (const opening of byName?.values() ?? []) opening.then((session) => session.close()).catch(() => {});
  }

  /**
   * Relays `http://127.0.0.1:<port>` in the instance to the gateway socket over one SSH channel
   * (see `../shared/gateway-relay.ts`): any free port the first time, the recorded URL's port
   * after a restart. Each instance has its own loopback (`--network none`), so ports never collide.
   */
  async exposeGateway(id: string, options: { socketPath: string; url?: string }): Promise<{ url: string }> {
    if (!this.capabilities.gatewayReach)
      throw new GymError(
        'CAPABILITY_UNSUPPORTED',
        `gateway reach is off for this apptainer provider (option gatewayReach, or no relay at ${this.#options.relayHelperPath}: run scripts/setup.sh)`,
        { details: { provider: this.name, capability: 'gatewayReach' } },
      );
    const open = await this.#relays.get(id)?.catch(() => null);
    if (open?.relay.isOpen) return { url: `http://127.0.0.1:${open.relay.port}` };
    let port = 0;
    if (options.url !== undefined) {
      const match = /^http:\/\/127\.0\.0\.1:(\d{1,5})$/.exec(options.url);
      port = Number(match?.[1]);
      if (match === null || port < 1 || port > 65535)
        throw new GymError(
          'PROVIDER_ERROR',
          `cannot restore gateway reach at ${options.url}: not a URL this provider gives`,
          { details: { url: options.url } },
        );
    }
    const starting = (async () => {
      await this.#resumed();
      const host = await this.fleet.locate(id);
      if (!(await this.fleet.exists(host, id)))
        throw new GymError('SANDBOX_NOT_FOUND', `sandbox ${id} does not exist`);
      const execId = randomBytes(12).toString('hex');
      const line = this.#execLine(
        host,
        id,
        [RELAY_IN_INSTANCE, String(port)],
        { PATH: DEFAULT_PATH, GYM_EXEC_ID: execId },
        '/',
      );
      const relay = await startSshRelay(
        host.connection,
        line,
        {
          label: `${host.name}/${this.#instanceName(id)}`,
          details: { sandboxId: id, host: host.name, port },
        },
        options.socketPath,
        this.#options.relayMaxConnections,
        this.#relayCounters,
      );
      this.#relayList.add(relay);
      return { relay, execId, host };
    })();
    this.#relays.set(id, starting);
    starting.catch(() => {
      if (this.#relays.get(id) === starting) this.#relays.delete(id);
    });
    return { url: `http://127.0.0.1:${(await starting).relay.port}` };
  }

  relayStats(): RelayStats {
    return relayStatsOf(this.#relayList, this.#relayCounters.refusedTotal);
  }

  /** Drops a sandbox's relay; with `kill`, also kills the relay process in the instance (by its tag). */
  async #releaseRelay(id: string, kill: boolean): Promise<void> {
    const starting = this.#relays.get(id);
    this.#relays.delete(id);
    const started = await starting?.catch(() => null);
    if (started === null || started === undefined) return;
    started.relay.close();
    this.#relayList.delete(started.relay);
    if (kill) await this.#killTagged(started.host, id, started.execId, 'tagged-only');
  }

  async close(): Promise<void> {
    // The sandboxes live on without reach until a daemon restores it at the same URL.
    await Promise.all([...this.#relays.keys()].map((id) => this.#releaseRelay(id, true)));
    for (const id of [...this.#sessions.keys()]) this.#closeSessions(id);
    await this.slurm?.close();
    this.fleet.close();
  }
}

export function createApptainerProvider(options: unknown, context: ProviderContext): SandboxProvider {
  return new ApptainerProvider(options, context);
}
