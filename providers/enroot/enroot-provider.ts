/**
 * Enroot over SSH: sandboxes are Enroot containers on the hosts of an inventory (compute nodes,
 * or the nodes of a Slurm allocation), on the same HostFleet as the apptainer provider
 * (providers/ssh/host-fleet.ts: one SSH connection per host, placement by free slots, a state
 * file per sandbox joined with `enroot list --fancy`).
 *
 * - Every enroot call on a host runs with ENROOT_RUNTIME_PATH, ENROOT_DATA_PATH,
 *   ENROOT_CACHE_PATH and ENROOT_TEMP_PATH under the host's `<workDirectory>/enroot/`: enroot
 *   finds a container's runtime state only through the same paths, and a non-interactive SSH
 *   session has no XDG directories to default to. And with ENROOT_ALLOW_SUPERUSER=no (it wins over
 *   enroot.conf): root's containers too are user namespaces, root mapped to the SSH user, never
 *   root of the host with its capabilities. (A root SSH user is refused unless the host sets
 *   allowRootSshUser: uid 0 even in a user namespace may write the host's /proc/sys.)
 * - A sandbox is `enroot create --name gym-<namespace>-<id> <image>.sqsh` (its own unpacked,
 *   writable root filesystem), then a detached `enroot start --root --rw` whose command is the
 *   keeper: the host's static busybox, mounted read-only at `/.gym-tools/busybox`, unshares a
 *   mount, network, pid, IPC and UTS namespace inside the container's user namespace (`--root`
 *   gives it the capabilities there), mounts a fresh /proc and /sys, and sleeps as the pid
 *   namespace's init. Enroot 4.1 itself gives a container only a user and a mount namespace: the
 *   host's network, its /proc (every process of the host) and its /sys. Commands are the host's
 *   busybox nsenter into all of the keeper's namespaces at once (the SSH user owns the
 *   container's user namespace), so a command sees loopback only and the sandbox's own processes,
 *   and nothing of the sandbox runs before it is inside them all.
 * - The keeper is named by its host PID and start time, checked on the host before each command,
 *   so a reused PID never receives a command. Destroy kills the keeper (the pid namespace dies
 *   with its init) and `enroot remove --force`.
 * - A timeout kills every process that carries the command's tag (`timeoutKill: tagged`), from the
 *   host: the host's busybox over the host's /proc, taking only the sandbox's pid namespace, so
 *   the agent (root of its namespaces) cannot stop the kill as it could a script inside.
 * - Gateway reach: the static relay (`.tools/gym-relay`, copied to each host once by content and
 *   bound read-only at `/.gym-tools/gym-relay`) runs in the keeper's namespaces over one held SSH
 *   channel, listening on the sandbox's own loopback (brought up by the keeper), and frames each
 *   connection to the daemon's gateway socket and nothing else (`../shared/gateway-relay.ts`).
 * - Sessions: one long-lived `/bin/sh` per session, entered into the keeper's namespaces as a
 *   command is, over one SSH channel held for the session's life (`../ssh/ssh-session.ts`, the
 *   protocol in `../shared/shell-session.ts`); a timeout kills only the command's tagged processes.
 * - Not here, because Enroot has none of its own: cgroup limits (cpus, memory, pids are taken and
 *   not enforced: a Slurm allocation's cgroup is what bounds them), OOM reports, other users than
 *   root (only the SSH user is mapped into the container, as root), snapshot, gpus.
 * - Images: `prepareImage` turns the builder's root filesystem into a `.sqsh` with mksquashfs
 *   here, once per (content-addressed) reference, and copies it to each host once
 *   (`<workDirectory>/images/<reference>.sqsh`, with its config beside it). Derived images (a
 *   base, files, a command: the swe-mini task images) are made on each host: `enroot create` of
 *   the base, the files written into its root filesystem, the command run there by `enroot start
 *   --root --rw` in a network namespace of its own, then `enroot export` to a new `.sqsh`.
 * - Slurm mode (`slurm` instead of `hosts`): the hosts are the nodes of an allocation the provider
 *   holds (providers/ssh/slurm-hosts.ts), asked for at the first create, reached over SSH; when it
 *   ends its sandboxes are gone (and their containers removed where the nodes still answer), and
 *   the next create asks for a new one. pyxis (`srun --container-*`) is not used.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createReadStream, existsSync } from 'node:fs';
import { copyFile, mkdir, mkdtemp, readdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
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
import { packSingleFile, readFileThroughLinks, rebaseArchive, spoolSafeArchive } from '../shared/archive.ts';
import { CommandCannotStart, cannotStartResult, markSandboxLost, stdinBytes } from '../shared/exec-output.ts';
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

const EnrootHostSchema = HostSchema.extend({
  /** The enroot command on the host. */
  enroot: z.string().default('enroot'),
}).strict();
type EnrootHost = z.output<typeof EnrootHostSchema>;

export const EnrootOptionsSchema = z
  .object({
    /** The hosts; or, with `slurm`, none: the nodes of the allocation are the hosts. */
    hosts: z.array(EnrootHostSchema).min(1).optional(),
    /** Slurm mode: hold an allocation and run the sandboxes on its nodes. */
    slurm: SlurmModeSchema.optional(),
    ...FleetConnectionFields,
    /** How long a create waits for the container's keeper to run. */
    startTimeoutSeconds: z.number().int().positive().max(600).default(60),
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
export type EnrootOptions = z.input<typeof EnrootOptionsSchema>;

type Host = FleetHost<EnrootHost>;

const TOOLS = '/.gym-tools/busybox';
/** Where the relay is bound in every container started with gateway reach. */
const RELAY_IN_SANDBOX = '/.gym-tools/gym-relay';
const DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';
/** What a command whose keeper is gone prints (exit 255) before enroot is called at all. */
const GONE_MARK = 'gym: the sandbox keeper is gone';
/**
 * Enters the keeper's namespaces after `enroot exec` joined the container's user and mount
 * namespace: used only at start, before anything of the sandbox has run (commands use `#inside`).
 */
const ENTER = [TOOLS, 'nsenter', '-t', '1', '-m', '-n', '-p', '-u', '-i', '--'];
/**
 * The keeper: new mount, network, pid, IPC and UTS namespaces with their own /proc, a /sys of
 * the new network namespace, then a shell as the pid namespace's init that reaps orphans.
 */
const KEEPER = [
  TOOLS,
  'unshare',
  '-m',
  '-n',
  '-p',
  '-u',
  '-i',
  '-f',
  '--mount-proc',
  TOOLS,
  'sh',
  '-c',
  `${TOOLS} mount -t sysfs -o ro,nosuid,nodev,noexec sysfs /sys || exit 1; ${TOOLS} ip link set lo up || exit 1; ${TOOLS} hostname sandbox; trap 'exit 0' TERM; while :; do ${TOOLS} sleep 86400 & wait; done`,
];

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

/** What is kept beside an image, here and on each host. */
interface ImageRecord {
  reference: string;
  config: ImageConfig;
  createdAt: string;
}

/** A container's keeper as the host sees it: its PID and its start time (clock ticks since boot). */
interface Keeper {
  pid: number;
  startTime: string;
}

/** Runs a program here, failing with its stderr's end. */
async function runLocal(command: string, args: string[], stdin?: Readable): Promise<void> {
  const child = spawn(command, args, { stdio: [stdin ? 'pipe' : 'ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr!.on('data', (chunk: Buffer) => {
    stderr = (stderr + chunk.toString()).slice(-2000);
  });
  const closed = new Promise<number | null>((resolve, reject) => {
    child.once('error', reject);
    child.once('close', resolve);
  });
  if (stdin) await pipeline(stdin, child.stdin!);
  const code = await closed;
  if (code !== 0) throw new GymError('PROVIDER_ERROR', `${command} failed (exit ${code}): ${stderr.trim()}`);
}

/** Prints `PID STARTTIME` of the keeper of container $1 (the `enroot` shell function must exist), or nothing. */
const FIND_KEEPER = `pid=$(enroot list --fancy 2>/dev/null | awk -v n="$1" '$1 == n && $2 ~ /^[0-9]+$/ { print $2; exit }')
[ -n "$pid" ] || exit 0
{ read -r stat < "/proc/$pid/stat"; } 2>/dev/null || exit 0
rest=\${stat##*) }; set -- $rest
echo "$pid \${20}"`;

export class EnrootProvider implements SandboxProvider {
  readonly name: string = 'enroot';
  readonly capabilities: ProviderCapabilities;
  readonly #defaultCapabilities: ProviderCapabilities = {
    sessions: true,
    snapshot: false,
    gpus: false,
    diskLimit: false,
    pidsLimit: false,
    memoryLimit: false,
    otherUsers: false,
    networkModes: ['none'],
    gatewayReach: true,
    timeoutKill: 'tagged',
    stopProcesses: true,
    imageFormats: ['rootfs', 'derived'],
  };
  /** The hosts, their connections, placement and the sandboxes' state files. */
  readonly fleet: HostFleet<EnrootHost>;
  readonly #context: ProviderContext;
  readonly #startTimeoutSeconds: number;
  /** Each sandbox's keeper as found at create or first use. */
  readonly #keepers = new Map<string, Keeper>();
  /** Sessions by sandbox id, then by session name and user. */
  readonly #sessions = new Map<string, Map<string, Promise<ShellSession>>>();
  readonly #options: z.output<typeof EnrootOptionsSchema>;
  /** Gateway relays by sandbox id, with the exec id that tags each for the kill script. */
  readonly #relays = new Map<
    string,
    Promise<{ relay: GatewayRelay; execId: string; host: Host; keeper: Keeper }>
  >();
  readonly #relayCounters = { refusedTotal: 0 };
  readonly #relayList = new Set<GatewayRelay>();
  /** The relay's path on each host (copied there once, by content), by host name. */

  /** Slurm mode: the allocation whose nodes are the fleet's hosts. */
  readonly slurm: SlurmHosts | null = null;

  constructor(options: unknown, context: ProviderContext) {
    const parsed = EnrootOptionsSchema.parse(options);
    this.#context = context;
    this.#options = parsed;
    this.capabilities = {
      ...this.#defaultCapabilities,
      gatewayReach: parsed.gatewayReach && existsSync(parsed.relayHelperPath),
    };
    this.#startTimeoutSeconds = parsed.startTimeoutSeconds;
    this.fleet = this.#fleet(parsed.hosts ?? [], parsed);
    if (parsed.slurm !== undefined)
      this.slurm = new SlurmHosts(parsed.slurm, {
        logger: context.logger,
        namespace: context.namespace,
        checkHost: (host) => EnrootHostSchema.parse(host),
        setHosts: (hosts) => this.setHosts(hosts),
        list: () => this.fleet.list(),
        reap: (hosts) =>
          this.#reap(z.array(EnrootHostSchema).parse(hosts), parsed, this.#context.clock.now()),
      });
  }

  #fleet(hosts: EnrootHost[], connection: z.output<typeof EnrootOptionsSchema>): HostFleet<EnrootHost> {
    return new HostFleet({
      runtime: 'enroot',
      namespace: this.#context.namespace,
      logger: this.#context.logger,
      connection,
      hosts,
      stateFolder: 'enroot-sandboxes',
      liveNames: (host) => this.#liveContainers(host),
      nameOf: (id) => this.#containerName(id),
    });
  }

  /**
   * Removes our containers (and their state files) on hosts that left with an ended Slurm
   * allocation, over connections of their own: without pam_slurm_adopt, what was started over SSH
   * outlives the job. A node that no longer lets us in is passed over. Sandboxes created after
   * `endedAt` are spared: they belong to the next allocation, which may have the same nodes.
   */
  async #reap(
    hosts: EnrootHost[],
    connection: z.output<typeof EnrootOptionsSchema>,
    endedAt: number,
  ): Promise<void> {
    const fleet = this.#fleet(hosts, connection);
    try {
      await Promise.all(
        fleet.hosts.map(async (host) => {
          const sandboxes = await fleet.listHost(host).catch(() => []);
          for (const info of sandboxes)
            if (Date.parse(info.createdAt) <= endedAt)
              await fleet.run(host, this.#removeScript(host, info.id)).catch(() => {});
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

  /** Replaces the hosts (the nodes of a Slurm allocation, say); see HostFleet.setHosts. */
  setHosts(hosts: unknown): void {
    this.fleet.setHosts(z.array(EnrootHostSchema).parse(hosts));
  }

  #containerName(id: string): string {
    return `gym-${this.#context.namespace}-${id}`;
  }

  /**
   * `ENROOT_*=... enroot`'s environment for a host: every path under its work directory, and no
   * superuser containers.
   */
  #environment(host: Host): string[] {
    const base = posix.join(host.workDirectory, 'enroot');
    return [
      ...Object.entries(host.env).map(([key, value]) => `${key}=${value}`),
      `ENROOT_RUNTIME_PATH=${base}/runtime`,
      `ENROOT_DATA_PATH=${base}/data`,
      `ENROOT_CACHE_PATH=${base}/cache`,
      `ENROOT_TEMP_PATH=${base}/tmp`,
      // Always a user namespace, whatever enroot.conf or the host's env say (the environment wins
      // over enroot.conf): with this on, Enroot starts root's containers as root of the host.
      'ENROOT_ALLOW_SUPERUSER=no',
    ];
  }

  /** `env K=V ... enroot ARGS` as one shell line for the host. */
  #enroot(host: Host, args: string[]): string {
    return shellJoin(['env', ...this.#environment(host), host.enroot, ...args]);
  }

  /** A shell function `enroot` with the host's environment, for scripts that call it several times. */
  #enrootFunction(host: Host): string {
    return `enroot() { ${shellJoin(['env', ...this.#environment(host), host.enroot])} "$@"; }`;
  }

  #dataPath(host: Host, name: string): string {
    return posix.join(host.workDirectory, 'enroot', 'data', name);
  }

  #run(host: Host, command: string, stdin?: Buffer | Readable): Promise<RemoteResult> {
    return this.fleet.run(host, command, stdin);
  }

  /** The containers with a process on a host (`enroot list --fancy`). Throws when it does not answer. */
  async #liveContainers(host: Host): Promise<Set<string>> {
    const listed = await this.#run(host, this.#enroot(host, ['list', '--fancy']));
    if (listed.code !== 0)
      throw new GymError('PROVIDER_ERROR', `enroot list failed on ${host.name}: ${listed.stderr.trim()}`);
    const live = new Set<string>();
    for (const line of listed.stdout.toString().split('\n').slice(1)) {
      const [name, pid] = line.split(/\s+/);
      if (name && pid && /^\d+$/.test(pid)) live.add(name);
    }
    return live;
  }

  async health(): Promise<ProviderHealth> {
    if (this.slurm === null) return this.fleet.health((host) => this.#enroot(host, ['version']));
    const slurm = await this.slurm.health();
    if (!slurm.ok || this.fleet.hosts.length === 0) return slurm;
    const hosts = await this.fleet.health((host) => this.#enroot(host, ['version']));
    return { ...hosts, details: { ...hosts.details, slurm: slurm.details } };
  }

  async create(spec: SandboxSpec, options: CreateOptions = {}): Promise<SandboxInfo> {
    if (spec.resources?.gpus) throw new GymError('CAPABILITY_UNSUPPORTED', 'the enroot provider has no gpus');
    if (spec.resources?.diskMiB !== undefined)
      throw new GymError('CAPABILITY_UNSUPPORTED', 'the enroot provider cannot limit disk use');
    if (spec.network !== 'none')
      throw new GymError('CAPABILITY_UNSUPPORTED', `the enroot provider has no network mode ${spec.network}`);
    const unpin = this.slurm === null ? () => {} : await this.slurm.ensure();
    try {
      return await this.#createOnFleet(spec, options);
    } finally {
      unpin();
    }
  }

  async #createOnFleet(spec: SandboxSpec, options: CreateOptions): Promise<SandboxInfo> {
    const host = await this.fleet.pick();
    const imageConfig = await this.#ensureImage(host, spec.image);
    const relay = this.capabilities.gatewayReach
      ? await this.fleet.placeRelay(host, this.#options.relayHelperPath)
      : null;
    const id = options.id ?? `sbx-${randomBytes(8).toString('hex')}`;
    const name = this.#containerName(id);
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
      providerRef: `${host.name}/${name}`,
      scope: host.name,
    };
    this.fleet.place(id, host);
    try {
      // The state file first: a crash after it leaves a record a reaper can act on.
      await this.fleet.writeRecord(host, id, { info, spec, imageConfig });
      this.#keepers.set(id, await this.#start(host, name, this.#imagePath(host, spec.image), relay));
      if (spec.user !== undefined) await this.#checkUser(id, spec.user);
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

  /**
   * `enroot create`, then the keeper started detached (its stdio away from the SSH channel, in a
   * session of its own), then waits until `enroot list --fancy` names its PID and a command can
   * enter its namespaces. One SSH command: the waiting costs no round trips.
   */
  async #start(host: Host, name: string, image: string, relay: string | null): Promise<Keeper> {
    const log = `${posix.join(host.workDirectory, 'enroot', 'tmp', name)}.start.log`;
    const q = (word: string) => shellJoin([word]);
    const base = posix.join(host.workDirectory, 'enroot');
    const tries = this.#startTimeoutSeconds * 10;
    const script = [
      this.#enrootFunction(host),
      `mkdir -p ${shellJoin([`${base}/runtime`, `${base}/data`, `${base}/cache`, `${base}/tmp`])} || exit 20`,
      `enroot create --name ${q(name)} ${q(image)} >/dev/null 2>${q(log)} || { cat ${q(log)} >&2; rm -f ${q(log)}; exit 21; }`,
      // Its own line, not `cd / && setsid ...&`: that would background a subshell holding the channel's stdout.
      'cd / || exit 20',
      `setsid ${this.#enroot(host, [
        'start',
        '--root',
        '--rw',
        '--mount',
        `${host.busyboxPath}:${TOOLS}:none:x-create=file,bind,ro`,
        ...(relay === null ? [] : ['--mount', `${relay}:${RELAY_IN_SANDBOX}:none:x-create=file,bind,ro`]),
        name,
        ...KEEPER,
      ])} </dev/null >/dev/null 2>${q(log)} &`,
      'starter=$!',
      'i=0',
      `while [ $i -lt ${tries} ]; do`,
      `  keeper=$(set -- ${q(name)}; ${FIND_KEEPER})`,
      `  if [ -n "$keeper" ] && enroot exec \${keeper%% *} ${shellJoin([...ENTER, TOOLS, 'true'])} 2>/dev/null; then rm -f ${q(log)}; echo "$keeper"; exit 0; fi`,
      `  kill -0 $starter 2>/dev/null || { cat ${q(log)} >&2; rm -f ${q(log)}; exit 22; }`,
      '  sleep 0.1; i=$((i+1))',
      'done',
      `cat ${q(log)} >&2; rm -f ${q(log)}; echo 'the keeper did not start in time' >&2; exit 23`,
    ].join('\n');
    const started = await this.#run(host, script);
    const [pid, startTime] = started.stdout.toString().trim().split(' ');
    if (started.code !== 0 || pid === undefined || startTime === undefined)
      throw new GymError(
        'SANDBOX_START_FAILED',
        `starting enroot container ${name} on ${host.name} failed (exit ${started.code}): ${started.stderr.trim()}`,
      );
    return { pid: Number(pid), startTime };
  }

  /** The keeper of a sandbox, as found at create or looked up on its host. */
  async #keeper(host: Host, id: string): Promise<Keeper | null> {
    const known = this.#keepers.get(id);
    if (known !== undefined) return known;
    const found = await this.#run(
      host,
      `${this.#enrootFunction(host)}\nset -- ${shellJoin([this.#containerName(id)])}\n${FIND_KEEPER}`,
    );
    const [pid, startTime] = found.stdout.toString().trim().split(' ');
    if (pid === undefined || pid === '' || startTime === undefined) return null;
    const keeper = { pid: Number(pid), startTime };
    this.#keepers.set(id, keeper);
    return keeper;
  }

  /**
   * A shell line that runs argv inside the sandbox: first checks on the host that the keeper's
   * PID is still the keeper (its start time), then the host's busybox enters all of the keeper's
   * namespaces at once (user, mount, network, IPC, UTS, and the pid namespace of its init) before
   * anything of the sandbox runs. Not `enroot exec` and then the sandbox's /.gym-tools/busybox
   * nsenter: that ran a program of the sandbox's mount namespace in the host's pid and network
   * namespaces, and root in the sandbox can mount its own program over /.gym-tools/busybox.
   * The SSH user owns the container's user namespace, so it may enter it; it is root there.
   */
  #inside(host: Host, keeper: Keeper, argv: string[], tag?: string): string {
    const at = `/proc/${keeper.pid}/ns`;
    return [
      `{ read -r stat < /proc/${keeper.pid}/stat; } 2>/dev/null; rest=\${stat##*) }; set -- $rest`,
      `[ "\${20:-}" = ${shellJoin([keeper.startTime])} ] || { echo ${shellJoin([GONE_MARK])} >&2; exit 255; }`,
      `exec ${shellJoin([
        host.busyboxPath,
        'env',
        '-i',
        `PATH=${DEFAULT_PATH}`,
        'HOME=/root',
        // Tagged from the start: a process of the command the agent stops before it runs is still killed.
        ...(tag === undefined ? [] : [`${EXEC_ID_ENV}=${tag}`]),
        host.busyboxPath,
        'nsenter',
        `-U${at}/user`,
        `-m${at}/mnt`,
        `-n${at}/net`,
        `-i${at}/ipc`,
        `-u${at}/uts`,
        // The keeper's pid namespace is its init's: the keeper itself (unshare's parent) stays outside it.
        `-p${at}/pid_for_children`,
        '--preserve-credentials',
        '--',
        ...argv,
      ])}`,
    ].join('\n');
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

  /** The host and keeper of a sandbox; SANDBOX_NOT_FOUND when it has none. */
  async #target(id: string): Promise<{ host: Host; keeper: Keeper }> {
    await this.#resumed();
    const host = await this.fleet.locate(id);
    const keeper = await this.#keeper(host, id);
    if (keeper === null) throw new GymError('SANDBOX_NOT_FOUND', `sandbox ${id} does not exist`);
    return { host, keeper };
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
      // Enroot has no memory limit: an abnormal end is the sandbox gone, or a kill.
      return session.run(request, options, {
        classifyAbnormalEnd: async () => ((await this.fleet.exists(host, id)) ? 'killed' : 'sandbox_gone'),
      });
    }
    const started = Date.now();
    let spec: SandboxSpec;
    let imageConfig: ImageConfig | undefined;
    let keeper: Keeper | null;
    try {
      ({ spec, imageConfig } = await this.fleet.record(host, id));
      keeper = await this.#keeper(host, id);
    } catch (error) {
      // The host does not answer: its sandboxes are out of reach, as good as gone for a command.
      if (isGymError(error, 'PROVIDER_UNAVAILABLE')) return goneResult(Date.now() - started);
      throw error;
    }
    if (keeper === null) return goneResult(Date.now() - started);
    const user = request.user ?? spec.user;
    if (user !== undefined) await this.#checkUser(id, user);
    const tag = randomBytes(12).toString('hex');
    const env = {
      PATH: DEFAULT_PATH,
      HOME: '/root',
      ...imageConfig?.env,
      ...spec.env,
      ...request.env,
      GYM_EXEC_ID: tag,
    };
    const cwd = request.cwd ?? spec.workdir ?? imageConfig?.workdir ?? '/';
    const argv = request.argv ?? ['/bin/sh', '-c', request.command!];
    const line = this.#inside(
      host,
      keeper,
      [
        TOOLS,
        'env',
        '-i',
        ...Object.entries(env).map(([key, value]) => `${key}=${value}`),
        TOOLS,
        'sh',
        '-c',
        // 126: a shell's "cannot run", for a working directory the sandbox lacks.
        'cd "$1" || exit 126; shift; exec "$@"',
        'gym-exec',
        cwd,
        ...argv,
      ],
      tag,
    );
    const stdout = new OutputCapture(request.maxOutputBytes);
    const stderr = new OutputCapture(request.maxOutputBytes);
    const abort = new AbortController();
    let timedOut = false;
    let killing: Promise<KillOutcome> | null = null;
    const kill = () => {
      killing ??= this.#killTagged(host, keeper, tag);
      void killing.finally(() => abort.abort());
    };
    const timer = setTimeout(() => {
      timedOut = true;
      kill();
    }, request.timeoutMs);
    options.signal?.addEventListener('abort', kill, { once: true });
    const input = stdinBytes(request);
    let exit: { code: number | null; signal: string | null } | null = null;
    let lost = false;
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
      if (!timedOut) {
        if (!isGymError(error, 'PROVIDER_UNAVAILABLE')) throw error;
        lost = true;
      }
    } finally {
      clearTimeout(timer);
      options.signal?.removeEventListener('abort', kill);
    }
    const stderrText = stderr.toBuffer().toString('utf8');
    const keeperGone =
      exit?.code === 255 && stderrText.includes(GONE_MARK) && !(await this.fleet.exists(host, id));
    const sigkilled = exit !== null && (exit.signal === 'SIGKILL' || exit.code === 137);
    let status: ExecResult['status'] = timedOut ? 'timeout' : lost || keeperGone ? 'sandbox_gone' : 'ok';
    // Enroot has no memory limit, so a SIGKILL is never an OOM kill of ours: a kill, unless the sandbox died.
    if (status === 'ok' && (sigkilled || exit?.signal != null || exit?.code === null))
      status = (await this.fleet.exists(host, id)) ? 'killed' : 'sandbox_gone';
    // The kill had to take the sandbox: the command resisted it, so the loss is its own.
    const isKilledWhole = killing !== null && (await killing) === 'sandbox_killed';
    if (status === 'sandbox_gone' || isKilledWhole) this.#keepers.delete(id);
    const result: ExecResult = {
      status,
      exitCode: status === 'ok' ? (exit?.code ?? null) : status === 'killed' && sigkilled ? 137 : null,
      stdout: stdout.toBuffer().toString('utf8'),
      stderr: stderrText,
      stdoutTruncated: stdout.isTruncated,
      stderrTruncated: stderr.isTruncated,
      stdoutBytes: stdout.totalBytes,
      stderrBytes: stderr.totalBytes,
      durationMs: Date.now() - started,
    };
    if (!isKilledWhole) return result;
    return markSandboxLost(
      { ...result, stderr: `${result.stderr}${KILL_FAILED_NOTE.toString()}` },
      timedOut ? 'timeout' : 'killed',
      KILL_FAILED_REASON,
    );
  }

  /**
   * Only root exists in the container (the SSH user, remapped): a user that resolves to uid 0 is
   * fine, a missing one is VALIDATION_FAILED, any other CAPABILITY_UNSUPPORTED.
   */
  async #checkUser(id: string, user: string): Promise<void> {
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
    if (uid !== 0 || gid !== 0)
      throw new GymError(
        'CAPABILITY_UNSUPPORTED',
        `the enroot provider runs commands as root only (enroot maps one user into a container), not as ${user}`,
        { details: { provider: 'enroot', capability: 'otherUsers' } },
      );
  }

  /**
   * Kills the processes of the sandbox tagged with `tag`, from the host: a kill script inside the
   * sandbox runs as root of its namespaces, as the agent does, and the agent can stop it
   * (SIGSTOP) before it kills anything, so that the command and the daemon's exec of it (and its
   * SSH channels) never end. The host's busybox reads the host's /proc, which nothing in the
   * sandbox can touch, and takes only processes in the keeper's pid namespace.
   */
  async #killTagged(
    host: Host,
    keeper: Keeper,
    tag: string,
    reach: KillReach = 'tagged-and-their-sessions',
  ): Promise<KillOutcome> {
    const namespace = `/proc/${keeper.pid}/ns/pid_for_children`;
    // Only while the keeper is the one we started (its pid not reused).
    const guard = [
      `{ read -r stat < /proc/${keeper.pid}/stat; } 2>/dev/null; rest=\${stat##*) }; set -- $rest`,
      `[ "\${20:-}" = ${shellJoin([keeper.startTime])} ] || exit 0`,
    ];
    const script = [
      ...guard,
      `exec ${shellJoin(hostKillScriptArgv(host.busyboxPath, namespace, tag, reach))}`,
    ];
    const ran = await this.#run(host, script.join('\n')).catch(() => null);
    if (ran === null || ran.code === 0) return 'killed';
    // It gave up (a fork loop outran its passes): the sandbox's namespace goes whole, which no
    // fork outruns; resisting its kill cost the command its sandbox.
    this.#context.logger.warn(
      { keeper: keeper.pid },
      'the timeout kill did not take effect; killing the sandbox',
    );
    await this.#run(
      host,
      [...guard, `exec ${shellJoin(hostKillNamespaceArgv(host.busyboxPath, namespace))}`].join('\n'),
    ).catch(() => null);
    return 'sandbox_killed';
  }

  /**
   * The session shell `name` in the sandbox, opened on first use (and again after it was lost):
   * the image's `/bin/sh`, entered into the keeper's namespaces as a one-shot command is (with
   * the sandbox's env and working directory), over one SSH channel held for the session's life.
   * Only root exists in the container: another user is refused as for a one-shot command.
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
      const keeper = await this.#keeper(host, id);
      if (keeper === null) throw new GymError('SANDBOX_NOT_FOUND', `sandbox ${id} does not exist`);
      const effective = user ?? spec.user;
      if (effective !== undefined) await this.#checkUser(id, effective);
      const env = { PATH: DEFAULT_PATH, HOME: '/root', ...imageConfig?.env, ...spec.env };
      const line = this.#inside(host, keeper, [
        TOOLS,
        'env',
        '-i',
        ...Object.entries(env).map(([key, value]) => `${key}=${value}`),
        TOOLS,
        'sh',
        '-c',
        // 126: a shell's "cannot run", for a working directory the sandbox lacks.
        'cd "$1" || exit 126; shift; exec "$@"',
        'gym-session',
        spec.workdir ?? imageConfig?.workdir ?? '/',
        '/bin/sh',
      ]);
      // Only the command's processes: the shell shares their session. From the host, out of
      // the agent's reach: a failed pass is not escalated to the sandbox (yet).
      return openSshSession(host.connection, line, (execId) =>
        this.#killTagged(host, keeper, execId, 'tagged-only'),
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
   * Relays `http://127.0.0.1:<port>` in the sandbox to the gateway socket over one SSH channel
   * (see `../shared/gateway-relay.ts`): the relay, bound read-only into the container, runs in
   * the keeper's namespaces, so it listens on the sandbox's own loopback (the keeper's network
   * namespace) and ports never collide between sandboxes on one node. Any free port the first
   * time, the recorded URL's port after a restart.
   */
  async exposeGateway(id: string, options: { socketPath: string; url?: string }): Promise<{ url: string }> {
    if (!this.capabilities.gatewayReach)
      throw new GymError(
        'CAPABILITY_UNSUPPORTED',
        `gateway reach is off for this enroot provider (option gatewayReach, or no relay at ${this.#options.relayHelperPath}: run scripts/setup.sh)`,
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
      const { host, keeper } = await this.#target(id);
      const execId = randomBytes(12).toString('hex');
      const line = this.#inside(
        host,
        keeper,
        [
          TOOLS,
          'env',
          '-i',
          `PATH=${DEFAULT_PATH}`,
          `${EXEC_ID_ENV}=${execId}`,
          RELAY_IN_SANDBOX,
          String(port),
        ],
        execId,
      );
      const relay = await startSshRelay(
        host.connection,
        line,
        {
          label: `${host.name}/${this.#containerName(id)}`,
          details: { sandboxId: id, host: host.name, port },
        },
        options.socketPath,
        this.#options.relayMaxConnections,
        this.#relayCounters,
      );
      this.#relayList.add(relay);
      return { relay, execId, host, keeper };
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

  /** Drops a sandbox's relay; with `kill`, also kills the relay process in the sandbox (by its tag). */
  async #releaseRelay(id: string, kill: boolean): Promise<void> {
    const starting = this.#relays.get(id);
    this.#relays.delete(id);
    const started = await starting?.catch(() => null);
    if (started === null || started === undefined) return;
    started.relay.close();
    this.#relayList.delete(started.relay);
    if (kill) await this.#killTagged(started.host, started.keeper, started.execId, 'tagged-only');
  }

  async stopProcesses(id: string): Promise<{ killed: number }> {
    // Session shells and the relay are among the processes killed: dropped first, started again on use.
    this.#closeSessions(id);
    await this.#releaseRelay(id, false);
    // Every process of the sandbox's pid namespace but its init (the keeper's child), from the
    // host: a script inside would run as root of the sandbox, as the agent does, which could stop it.
    const { host, keeper } = await this.#target(id);
    const script = [
      `{ read -r stat < /proc/${keeper.pid}/stat; } 2>/dev/null; rest=\${stat##*) }; set -- $rest`,
      `[ "\${20:-}" = ${shellJoin([keeper.startTime])} ] || { echo ${shellJoin([GONE_MARK])} >&2; exit 255; }`,
      // The children file ends without a newline: read fails at its end though it read the pid.
      `read -r init rest < /proc/${keeper.pid}/task/${keeper.pid}/children; [ -n "$init" ] || exit 255`,
      // The init's host pid is read there, in place of the placeholder argument.
      `exec ${shellJoin(hostStopScriptArgv(host.busyboxPath, `/proc/${keeper.pid}/ns/pid_for_children`, 0).slice(0, -1))} "$init"`,
    ].join('\n');
    const result = await this.#run(host, script);
    if (result.code !== 0)
      throw new GymError('PROVIDER_ERROR', `stopping processes of ${id}: ${result.stderr.trim()}`);
    return { killed: Number(result.stdout.toString().trim()) || 0 };
  }

  async #tools(id: string, args: string[], stdin?: Readable): Promise<RemoteResult> {
    const { host, keeper } = await this.#target(id);
    const result = await this.#run(host, this.#inside(host, keeper, [TOOLS, ...args]), stdin);
    if (result.code === 255 && result.stderr.includes(GONE_MARK)) {
      this.#keepers.delete(id);
      throw new GymError('SANDBOX_NOT_FOUND', `sandbox ${id} does not exist`);
    }
    return result;
  }

  async #extract(
    id: string,
    directories: Iterable<string>,
    archive: Readable,
    target: string,
  ): Promise<void> {
    const result = await this.#tools(id, guardedExtractArgs(TOOLS, directories), archive);
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
    await this.#target(id);
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

  async destroy(id: string): Promise<void> {
    await this.#resumed();
    this.#closeSessions(id);
    await this.#releaseRelay(id, false);
    const host = await this.fleet.hostToDestroy(id);
    if (host === null) {
      this.#keepers.delete(id);
      return;
    }
    await this.#run(host, this.#removeScript(host, id));
    this.fleet.forget(id);
    this.#keepers.delete(id);
  }

  /**
   * Kills a sandbox's keeper and removes its container and state file. The keeper's child is the
   * init of the sandbox's pid namespace: every command dies with it; then the keeper itself, then
   * the root filesystem.
   */
  #removeScript(host: Host, id: string): string {
    const name = this.#containerName(id);
    return [
      this.#enrootFunction(host),
      `set -- ${shellJoin([name])}`,
      `keeper=$(${FIND_KEEPER})`,
      'if [ -n "$keeper" ]; then pid=${keeper%% *}',
      '  for child in $(cat /proc/$pid/task/*/children 2>/dev/null); do kill -9 $child 2>/dev/null; done',
      '  kill -9 $pid 2>/dev/null; i=0; while kill -0 $pid 2>/dev/null && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done',
      'fi',
      `enroot remove --force ${shellJoin([name])} >/dev/null 2>&1`,
      `rm -f ${shellJoin([this.fleet.statePath(host, id)])}`,
    ].join('\n');
  }

  async close(): Promise<void> {
    // The sandboxes live on without reach until a daemon restores it at the same URL.
    await Promise.all([...this.#relays.keys()].map((id) => this.#releaseRelay(id, true)));
    for (const id of [...this.#sessions.keys()]) this.#closeSessions(id);
    await this.slurm?.close();
    this.fleet.close();
  }

  // Images -------------------------------------------------------------------------------------

  #imagePath(host: Host, reference: string): string {
    return `${posix.join(host.workDirectory, 'images', imageFolderName(reference))}.sqsh`;
  }

  /** Where this daemon keeps the `.sqsh` files it made, to copy them to a host that lacks one. */
  #cachePath(reference: string): string {
    return join(this.#context.stateDirectory, 'images', imageFolderName(reference));
  }

  /**
   * Makes sure `reference` is on the host, copying it there from this daemon's cache when it is
   * not (once per host: the file is named by the content-addressed reference, so a second create
   * or a second daemon finds it); returns its config. IMAGE_NOT_FOUND when neither has it.
   */
  async #ensureImage(host: Host, reference: string): Promise<ImageConfig> {
    const target = this.#imagePath(host, reference);
    const present = await this.#run(
      host,
      `test -f ${shellJoin([target])} && { cat ${shellJoin([`${target}.image.json`])} 2>/dev/null; true; }`,
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

  /** Copies a cached `.sqsh` to a host: written beside, then renamed into place. */
  async #upload(host: Host, reference: string, record: ImageRecord): Promise<void> {
    const target = this.#imagePath(host, reference);
    const partial = `${target}.partial-${randomBytes(4).toString('hex')}`;
    const copied = await this.#run(
      host,
      `mkdir -p ${shellJoin([posix.dirname(target)])} && cat > ${shellJoin([partial])} && { [ -f ${shellJoin([target])} ] && rm -f ${shellJoin([partial])} || mv ${shellJoin([partial, target])}; }`,
      createReadStream(`${this.#cachePath(reference)}.sqsh`),
    );
    if (copied.code !== 0) {
      await this.#run(host, `rm -f ${shellJoin([partial])}`).catch(() => {});
      throw new GymError(
        'PROVIDER_ERROR',
        `copying image ${reference} to ${host.name} failed: ${copied.stderr.trim()}`,
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

  /** How many times a `.sqsh` was copied to a host (tests count it). */
  imageCopies = 0;
  /** How many `.sqsh` files this daemon made from root filesystems (tests count it). */
  imageSquashes = 0;
  /** How many derived images were made on a host (tests count it). */
  imageBuilds = 0;

  /**
   * Makes a derived image on a host: `enroot create` of the base, the files written into its root
   * filesystem's working directory, the command run there by `enroot start --root --rw` in a
   * network namespace of its own, then `enroot export` to the image's `.sqsh`, renamed into place.
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
    const name = `gym-build-${randomBytes(6).toString('hex')}`;
    const rootfs = this.#dataPath(host, name);
    const partial = `${target}.partial-${randomBytes(4).toString('hex')}`;
    const fail = async (why: string, code: ErrorCode = 'PROVIDER_ERROR'): Promise<never> => {
      await this.#run(
        host,
        `${this.#enroot(host, ['remove', '--force', name])} >/dev/null 2>&1; rm -f ${shellJoin([partial])}`,
      ).catch(() => {});
      throw new GymError(code, `making image ${source.reference} on ${host.name}: ${why}`);
    };
    const inside = posix.join(rootfs, source.workdir);
    const base = posix.join(host.workDirectory, 'enroot');
    const created = await this.#run(
      host,
      `mkdir -p ${shellJoin([`${base}/runtime`, `${base}/data`, `${base}/cache`, `${base}/tmp`])} && ${this.#enroot(host, ['create', '--name', name, this.#imagePath(host, source.base)])} >/dev/null && mkdir -p ${shellJoin([inside])} && tar -x --no-same-owner -C ${shellJoin([inside])}`,
      packFiles(source.files),
    );
    if (created.code !== 0) await fail(`creating it from the base failed: ${created.stderr.trim()}`);
    let output = '';
    const keep = (chunk: Buffer) => {
      output = (output + chunk.toString()).slice(-4000);
    };
    const ran = await host.connection.exec(
      `cd / && ${this.#enroot(host, [
        'start',
        '--root',
        '--rw',
        '--mount',
        `${host.busyboxPath}:${TOOLS}:none:x-create=file,bind,ro`,
        name,
        TOOLS,
        'unshare',
        '-n',
        '--',
        TOOLS,
        'env',
        '-i',
        `PATH=${DEFAULT_PATH}`,
        'HOME=/root',
        ...Object.entries({ ...baseConfig.env, ...source.env }).map(([key, value]) => `${key}=${value}`),
        TOOLS,
        'sh',
        '-c',
        // 126: a shell's "cannot run", for a working directory the sandbox lacks.
        'cd "$1" || exit 126; shift; exec "$@"',
        'gym-build',
        source.workdir,
        '/bin/sh',
        '-c',
        source.command,
      ])} </dev/null`,
      { onStdout: keep, onStderr: keep },
    );
    if (ran.code !== 0)
      await fail(`the command failed (exit ${ran.code ?? ran.signal}): ${output}`, 'VALIDATION_FAILED');
    const record: ImageRecord = {
      reference: source.reference,
      config,
      createdAt: new Date(this.#context.clock.now()).toISOString(),
    };
    // The empty file enroot made for the busybox mount goes before the export.
    const exported = await this.#run(
      host,
      `rm -rf ${shellJoin([posix.join(rootfs, '.gym-tools')])} && ${this.#enroot(host, ['export', '--output', partial, name])} >/dev/null && ${this.#enroot(host, ['remove', '--force', name])} >/dev/null && cat > ${shellJoin([`${partial}.image.json`])} && if [ -f ${shellJoin([target])} ]; then rm -f ${shellJoin([partial, `${partial}.image.json`])}; else mv ${shellJoin([partial, target])} && mv ${shellJoin([`${partial}.image.json`, `${target}.image.json`])}; fi`,
      Buffer.from(JSON.stringify(record)),
    );
    if (exported.code !== 0) await fail(`exporting it failed: ${exported.stderr.trim()}`);
    this.imageBuilds += 1;
    return config;
  }

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
          `test -f ${shellJoin([this.#imagePath(host, source.reference)])}`,
        ).catch(() => null);
        if (has === null) return null;
        return has.code === 0 ? this.#ensureImage(host, source.reference) : this.#buildDerived(host, source);
      }),
    );
    const config = built.find((entry) => entry !== null);
    if (config === undefined) throw new GymError('PROVIDER_UNAVAILABLE', 'no enroot host answers');
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

  /**
   * The builder's root filesystem as a `.sqsh`, made here once per reference: unpacked (device
   * nodes left out, as `enroot export` leaves /dev out), then mksquashfs with every file owned by
   * root, as `enroot export` makes them (only one user exists in an enroot container).
   */
  async #squash(reference: string, rootfs: Readable): Promise<void> {
    const cache = this.#cachePath(reference);
    const work = await mkdtemp(`${cache}.unpack-`);
    const partial = `${cache}.sqsh.partial-${randomBytes(4).toString('hex')}`;
    try {
      await runLocal(
        'tar',
        ['-x', '--no-same-owner', '--exclude=./dev/*', '--exclude=dev/*', '-C', work],
        rootfs,
      );
      // Enroot's own default squash options: data blocks uncompressed, several times faster to make.
      await runLocal('mksquashfs', [
        work,
        partial,
        '-all-root',
        '-noappend',
        '-no-progress',
        '-quiet',
        '-comp',
        'lzo',
        '-noD',
      ]);
      await rename(partial, `${cache}.sqsh`);
      this.imageSquashes += 1;
    } finally {
      await rm(work, { recursive: true, force: true });
      await rm(partial, { force: true });
    }
  }

  async prepareImage(source: ImageSource): Promise<void> {
    if (source.format === 'derived') return this.#prepareDerived(source);
    if (source.format !== 'rootfs')
      throw new GymError(
        'CAPABILITY_UNSUPPORTED',
        `the enroot provider prepares no ${source.format} images`,
        {
          details: { provider: 'enroot', capability: 'imageFormats' },
        },
      );
    await mkdir(join(this.#context.stateDirectory, 'images'), { recursive: true, mode: 0o700 });
    // The reference is content-addressed: a .sqsh made for it once stays right.
    const cache = this.#cachePath(source.reference);
    const hasSquash = await stat(`${cache}.sqsh`).then(
      (found) => found.isFile(),
      () => false,
    );
    if (hasSquash) source.rootfs.resume();
    else await this.#squash(source.reference, source.rootfs);
    const createdAt = new Date(this.#context.clock.now()).toISOString();
    const references = [source.reference, ...(source.aliases ?? [])];
    for (const reference of references) {
      const record: ImageRecord = { reference, config: source.config, createdAt };
      if (reference !== source.reference)
        await copyFile(`${cache}.sqsh`, `${this.#cachePath(reference)}.sqsh`);
      await writeFile(`${this.#cachePath(reference)}.image.json`, JSON.stringify(record), { mode: 0o600 });
    }
    // Copied to every host that answers now; a host that does not gets it at its first create.
    await Promise.all(
      this.fleet.hosts.map(async (host) => {
        for (const reference of references) {
          const has = await this.#run(host, `test -f ${shellJoin([this.#imagePath(host, reference)])}`).catch(
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
        `test -f ${shellJoin([target])} && { cat ${shellJoin([`${target}.image.json`])} 2>/dev/null; true; }`,
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
}

export function createEnrootProvider(options: unknown, context: ProviderContext): SandboxProvider {
  return new EnrootProvider(options, context);
}
