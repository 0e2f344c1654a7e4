/**
 * Enroot over SSH, as a driver of the SSH-runtime provider (`../ssh-runtime/`: fleet, exec,
 * sessions, files, relay, image store); the fleet's state files are joined with `enroot list --fancy`.
 *
 * - Every enroot call runs with ENROOT_RUNTIME_PATH, _DATA_PATH, _CACHE_PATH and _TEMP_PATH under
 *   the host's `<workDirectory>/enroot/` (enroot finds a container's runtime state only through
 *   the same paths, and a non-interactive SSH session has no XDG directories), and with
 *   ENROOT_ALLOW_SUPERUSER=no (it wins over enroot.conf): root's containers too are user
 *   namespaces, root mapped to the SSH user. (A root SSH user is refused unless the host sets
 *   allowRootSshUser: uid 0 even in a user namespace may write the host's /proc/sys.)
 * - A sandbox is `enroot create --name gym-<namespace>-<id> <image>.sqsh`, then a detached `enroot
 *   start --root --rw` whose command is the keeper: the host's busybox, mounted read-only at
 *   `/.gym-tools/busybox`, unshares a mount, network, pid, IPC and UTS namespace inside the
 *   container's user namespace, mounts a fresh /proc and /sys, and sleeps as the pid namespace's
 *   init (Enroot 4.1 itself gives a container only a user and a mount namespace: the host's
 *   network, /proc and /sys). Commands, sessions and the relay are the host's busybox nsenter into
 *   all of the keeper's namespaces at once, so nothing of the sandbox runs before it is inside
 *   them all. The keeper is named by its host PID and start time, checked on the host before each
 *   entry and kill, so a reused PID never receives one. Destroy kills the keeper and `enroot remove`s.
 * - Not here, because Enroot has none of its own: cgroup limits (taken, not enforced: a Slurm
 *   allocation's cgroup bounds them), OOM reports, users other than root, snapshot, gpus.
 * - Images: the builder's root filesystem made a `.sqsh` here with mksquashfs, once per reference,
 *   copied to `<workDirectory>/images/<reference>.sqsh`. A derived image is `enroot create` of
 *   the base, its files and command (in a network namespace of its own), then `enroot export`.
 *   pyxis (`srun --container-*`) is not used.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, stat } from 'node:fs/promises';
import { posix } from 'node:path';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { z } from 'zod';
import { GymError } from '../../core/errors.ts';
import type { DerivedImageSource, ProviderContext } from '../sandbox-provider.ts';
import type { AbnormalEnd } from '../shared/abnormal-end.ts';
import { makeBeside } from '../shared/image-folder.ts';
import { EXEC_ID_ENV, hostStopScriptArgv } from '../shared/kill-script.ts';
import { shellJoin } from '../shared/shell.ts';
import type { FleetHost } from '../ssh/host-fleet.ts';
import type * as Runtime from '../ssh-runtime/driver.ts';
import { DEFAULT_PATH, RELAY_IN_SANDBOX, TOOLS } from '../ssh-runtime/driver.ts';
import { sshRuntimeHostSchema, sshRuntimeOptionsSchema } from '../ssh-runtime/options.ts';
import { SshRuntimeProvider } from '../ssh-runtime/ssh-runtime-provider.ts';

/** A host, with the enroot command there. */
const EnrootHostSchema = sshRuntimeHostSchema('enroot');
type EnrootHost = z.output<typeof EnrootHostSchema>;
type Host = FleetHost<EnrootHost>;

export const EnrootOptionsSchema = sshRuntimeOptionsSchema(EnrootHostSchema, {
  /** How long a create waits for the container's keeper to run. */
  startTimeoutSeconds: z.number().int().positive().max(600).default(60),
});
export type EnrootOptions = z.input<typeof EnrootOptionsSchema>;

/** What a command whose keeper is gone prints (exit 255) before enroot is called at all. */
const GONE_MARK = 'gym: the sandbox keeper is gone';
/** What a guard of an entry does when the keeper is gone. */
const GONE = `{ echo ${shellJoin([GONE_MARK])} >&2; exit 255; }`;
/**
 * The host's busybox nsenter flags that join every namespace of the keeper whose `/proc/PID/ns`
 * is `at`: its user, mount, network, IPC and UTS namespaces, and the pid namespace of its init
 * (the keeper itself, unshare's parent, stays outside it).
 */
function entryFlags(at: string): string[] {
  return [
    ...[`-U${at}/user`, `-m${at}/mnt`, `-n${at}/net`, `-i${at}/ipc`, `-u${at}/uts`],
    ...[`-p${at}/pid_for_children`, '--preserve-credentials', '--'],
  ];
}
/** The keeper's init, once set up, sleeps in a child with exactly this command line. */
const KEEPER_SLEEP = [TOOLS, 'sleep', '86400'];
/**
 * The keeper: new mount, network, pid, IPC and UTS namespaces with their own /proc, a /sys of
 * the new network namespace, then a shell as the pid namespace's init that reaps orphans.
 */
const KEEPER = [
  ...[TOOLS, 'unshare', '-m', '-n', '-p', '-u', '-i', '-f', '--mount-proc', TOOLS, 'sh', '-c'],
  `${TOOLS} mount -t sysfs -o ro,nosuid,nodev,noexec sysfs /sys || exit 1; ${TOOLS} ip link set lo up || exit 1; ${TOOLS} hostname sandbox; trap 'exit 0' TERM; while :; do ${KEEPER_SLEEP.join(' ')} & wait; done`,
];

/** Where a derived image's build keeps, in its root filesystem, what Enroot's hooks change at start. */
const HOOKS_ASIDE = '.gym-before-hooks';
/** The files the stock hooks rewrite or add (10-shadow, 10-aptfix), relative to the root. */
const HOOKED_FILES = ['etc/passwd', 'etc/group', 'etc/apt/apt.conf.d/enroot'];

/**
 * Host lines that keep aside, in `aside`, the base's copy of each hooked file (a `.absent` mark
 * for one it lacks) and the SSH user's home folder when the base lacks it (10-shadow makes it).
 */
function keepAside(rootfs: string, aside: string): string {
  const lines = [`mkdir -p ${shellJoin([aside])}`];
  for (const file of HOOKED_FILES) {
    const [from, kept] = [posix.join(rootfs, file), posix.join(aside, file.replaceAll('/', '_'))];
    lines.push(
      `if [ -e ${shellJoin([from])} ]; then cp -p ${shellJoin([from, kept])}; else : > ${shellJoin([`${kept}.absent`])}; fi`,
    );
  }
  // The hook makes the home folder of the user's passwd entry (not $HOME, which a site may move).
  lines.push(
    `h=$(getent passwd "$(id -u)" | cut -d: -f6)`,
    `if [ -n "$h" ] && [ ! -e ${shellJoin([rootfs])}"$h" ]; then printf '%s' "$h" > ${shellJoin([posix.join(aside, 'home')])}; fi`,
  );
  return `{ ${lines.join('; ')}; }`;
}

/**
 * Inside the build, before its command: each hooked file back as the base had it (or gone), the
 * home folder the hook made removed when still empty, then the aside folder.
 */
const PUT_BACK = [
  `A=/${HOOKS_ASIDE};`,
  ...HOOKED_FILES.map((file) => {
    const kept = `$A/${file.replaceAll('/', '_')}`;
    return `if [ -e ${kept}.absent ]; then ${TOOLS} rm -f /${file}; else ${TOOLS} cp -p ${kept} /${file} || exit 125; fi;`;
  }),
  `if [ -e $A/home ]; then read -r h < $A/home; ${TOOLS} rmdir "$h" 2>/dev/null; fi;`,
  `${TOOLS} rm -rf $A || exit 125;`,
].join(' ');

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

/**
 * A shell function `ready PID` that answers, from the host alone, whether the keeper PID has set
 * up its sandbox: its child (the init of the new pid namespace) has mounted /sys, brought up lo and
 * started its sleep; then whether the host's busybox can enter all of its namespaces, as every
 * command does. Not `enroot exec`: enroot-nsenter joins the container's mount namespace before it
 * reads its environment through the caller's `/proc/self`, and the keeper's /proc there is its
 * own pid namespace's, in which the caller does not exist ("failed to load environment:
 * /proc/self/fd/N: No such file or directory"), so that never answers yes under the real enroot.
 */
function readyFunction(host: Host): string {
  const sleeping = `${KEEPER_SLEEP.join(' ')} `;
  const enter = [
    shellJoin([host.busyboxPath, 'nsenter']),
    ...entryFlags('/proc/$1/ns').map((flag) => `"${flag}"`),
  ];
  return [
    'ready() {',
    // The children files end without a newline: read fails at their end though it read the pid.
    '  init=; { read -r init rest < /proc/$1/task/$1/children; } 2>/dev/null; [ -n "$init" ] || return 1',
    '  for child in $(cat /proc/$init/task/$init/children 2>/dev/null); do',
    `    [ "$(tr '\\0' ' ' < /proc/$child/cmdline 2>/dev/null)" = ${shellJoin([sleeping])} ] || continue`,
    `    ${enter.join(' ')} ${shellJoin([TOOLS, 'true'])} </dev/null >/dev/null 2>&1; return`,
    '  done',
    '  return 1',
    '}',
  ].join('\n');
}

/** Shell lines that go on only while the keeper's PID is the keeper we started (its start time), else run `otherwise`. */
function keeperGuard(keeper: Keeper, otherwise: string): string {
  return [
    `{ read -r stat < /proc/${keeper.pid}/stat; } 2>/dev/null; rest=\${stat##*) }; set -- $rest`,
    `[ "\${20:-}" = ${shellJoin([keeper.startTime])} ] || ${otherwise}`,
    '',
  ].join('\n');
}

/** Enroot as an SSH runtime; a sandbox's target is its keeper. */
class EnrootDriver implements Runtime.SshRuntimeDriver<EnrootHost, Keeper> {
  readonly runtime = 'enroot';
  readonly capabilities = { pidsLimit: false, memoryLimit: false, otherUsers: false };
  readonly stateFolder = 'enroot-sandboxes';
  readonly #access: Runtime.RuntimeAccess<EnrootHost>;
  readonly #startTimeoutSeconds: number;
  /** Each sandbox's keeper as found at create or first use. */
  readonly #keepers = new Map<string, Keeper>();

  constructor(access: Runtime.RuntimeAccess<EnrootHost>, startTimeoutSeconds: number) {
    this.#access = access;
    this.#startTimeoutSeconds = startTimeoutSeconds;
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
      // Not through a login shell (Enroot's default): that reads the image's /etc/profile before
      // the keeper has unshared anything (in the host's network namespace), and fails the start of
      // an image without root's home folder (enroot-switchroot changes into it first).
      'ENROOT_LOGIN_SHELL=no',
      // Never the SSH user's home folder in the container (enroot.conf may turn it on: the 10-home
      // hook binds it read-write at /root): the agent would write the user's ~/.bashrc or
      // ~/.ssh/authorized_keys on the node and run code there at its next login.
      'ENROOT_MOUNT_HOME=no',
    ];
  }

  /**
   * `env K=V ... enroot` as the start of a shell line, PATH first: enroot runs its helpers
   * (enroot-nsenter, enroot-mount, enroot-switchroot) by name, and an SSH command's PATH is the
   * system's, without the folder of an enroot installed under a prefix of its own. So the folder of
   * the `enroot` the host names comes first (before the host's `env` PATH, or the session's).
   */
  #enrootCommand(host: Host): string {
    const folder = host.enroot.includes('/') ? posix.dirname(host.enroot) : null;
    const { PATH: givenPath, ...rest } = host.env;
    const others = this.#environment({ ...host, env: rest });
    const path =
      folder === null
        ? givenPath === undefined
          ? []
          : [shellJoin([`PATH=${givenPath}`])]
        : [
            `${shellJoin([`PATH=${folder}:`])}${givenPath === undefined ? '"$PATH"' : shellJoin([givenPath])}`,
          ];
    return ['env', ...path, shellJoin([...others, host.enroot])].join(' ');
  }

  /** `env K=V ... enroot ARGS` as one shell line for the host. */
  #enroot(host: Host, args: string[]): string {
    return `${this.#enrootCommand(host)} ${shellJoin(args)}`;
  }

  /** A shell function `enroot` with the host's environment, for scripts that call it several times. */
  #enrootFunction(host: Host): string {
    return `enroot() { ${this.#enrootCommand(host)} "$@"; }`;
  }

  /** Makes enroot's four folders on the host. */
  #makeFolders(host: Host): string {
    const base = posix.join(host.workDirectory, 'enroot');
    return `mkdir -p ${shellJoin([`${base}/runtime`, `${base}/data`, `${base}/cache`, `${base}/tmp`])}`;
  }

  versionLine(host: Host): string {
    return this.#enroot(host, ['version']);
  }

  /** The containers with a process on a host (`enroot list --fancy`). */
  async liveNames(host: Host): Promise<Set<string>> {
    const listed = await this.#access.run(host, this.#enroot(host, ['list', '--fancy']));
    if (listed.code !== 0)
      throw new GymError('PROVIDER_ERROR', `enroot list failed on ${host.name}: ${listed.stderr.trim()}`);
    const live = new Set<string>();
    for (const line of listed.stdout.toString().split('\n').slice(1)) {
      const [name, pid] = line.split(/\s+/);
      if (name && pid && /^\d+$/.test(pid)) live.add(name);
    }
    return live;
  }

  /**
   * `enroot create`, then the keeper started detached (its stdio away from the SSH channel, in a
   * session of its own), then waits until `enroot list --fancy` names its PID, its init has set
   * the sandbox up and the host's busybox can enter it (`readyFunction`, all seen from the host).
   * One SSH command: the waiting costs no round trips.
   */
  async start(host: Host, { id, name, image, relay }: Runtime.SandboxStart): Promise<void> {
    const log = `${posix.join(host.workDirectory, 'enroot', 'tmp', name)}.start.log`;
    const q = (word: string) => shellJoin([word]);
    const script = [
      this.#enrootFunction(host),
      readyFunction(host),
      `${this.#makeFolders(host)} || exit 20`,
      `enroot create --name ${q(name)} ${q(image)} >/dev/null 2>${q(log)} || { cat ${q(log)} >&2; rm -f ${q(log)}; exit 21; }`,
      // Its own line, not `cd / && setsid ...&`: that would background a subshell holding the channel's stdout.
      'cd / || exit 20',
      `setsid ${this.#enroot(host, [
        ...['start', '--root', '--rw', '--mount', `${host.busyboxPath}:${TOOLS}:none:x-create=file,bind,ro`],
        ...(relay === null ? [] : ['--mount', `${relay}:${RELAY_IN_SANDBOX}:none:x-create=file,bind,ro`]),
        name,
        ...KEEPER,
      ])} </dev/null >/dev/null 2>${q(log)} &`,
      'starter=$!',
      // A deadline of the clock, not a count of rounds: a round's `enroot list` may take a second
      // on a loaded node. The keeper's PID, once listed, stays its PID (exec and unshare keep it),
      // so the listing runs again only while none is found or the one found is gone.
      `deadline=$(( $(date +%s) + ${this.#startTimeoutSeconds} )); keeper=`,
      'while [ "$(date +%s)" -lt "$deadline" ]; do',
      '  [ -z "$keeper" ] || [ -d "/proc/${keeper%% *}" ] || keeper=',
      `  [ -n "$keeper" ] || keeper=$(set -- ${q(name)}; ${FIND_KEEPER})`,
      `  if [ -n "$keeper" ] && ready \${keeper%% *}; then rm -f ${q(log)}; echo "$keeper"; exit 0; fi`,
      `  kill -0 $starter 2>/dev/null || { cat ${q(log)} >&2; rm -f ${q(log)}; exit 22; }`,
      '  sleep 0.1',
      'done',
      `cat ${q(log)} >&2; rm -f ${q(log)}; echo 'the keeper did not start in time' >&2; exit 23`,
    ].join('\n');
    const started = await this.#access.run(host, script);
    const [pid, startTime] = started.stdout.toString().trim().split(' ');
    if (started.code !== 0 || pid === undefined || startTime === undefined)
      throw new GymError(
        'SANDBOX_START_FAILED',
        `starting enroot container ${name} on ${host.name} failed (exit ${started.code}): ${started.stderr.trim()}`,
      );
    this.#keepers.set(id, { pid: Number(pid), startTime });
  }

  /** The keeper of a sandbox, as found at create or looked up on its host. */
  async target(host: Host, id: string): Promise<Keeper | null> {
    const known = this.#keepers.get(id);
    if (known !== undefined) return known;
    const found = await this.#access.run(
      host,
      `${this.#enrootFunction(host)}\nset -- ${shellJoin([this.#access.nameOf(id)])}\n${FIND_KEEPER}`,
    );
    const [pid, startTime] = found.stdout.toString().trim().split(' ');
    if (pid === undefined || pid === '' || startTime === undefined) return null;
    const keeper = { pid: Number(pid), startTime };
    this.#keepers.set(id, keeper);
    return keeper;
  }

  /**
   * A shell line that runs argv inside the sandbox: first checks on the host that the keeper's
   * PID is still the keeper, then the host's busybox enters all of the keeper's namespaces at
   * once (user, mount, network, IPC, UTS, and the pid namespace of its init) before anything of
   * the sandbox runs. Not `enroot exec` and then the sandbox's /.gym-tools/busybox nsenter: that
   * ran a program of the sandbox's mount namespace in the host's pid and network namespaces, and
   * root in the sandbox can mount its own program over /.gym-tools/busybox. The SSH user owns
   * the container's user namespace, so it may enter it; it is root there.
   */
  enter(host: Host, keeper: Keeper, argv: string[], options: { tag?: string } = {}): string {
    const at = `/proc/${keeper.pid}/ns`;
    // Tagged from the start: a process of the command the agent stops before it runs is still killed.
    const tagged = options.tag === undefined ? [] : [`${EXEC_ID_ENV}=${options.tag}`];
    return `${keeperGuard(keeper, GONE)}exec ${shellJoin([
      ...[
        host.busyboxPath,
        'env',
        '-i',
        `PATH=${DEFAULT_PATH}`,
        'HOME=/root',
        ...tagged,
        host.busyboxPath,
        'nsenter',
      ],
      ...entryFlags(at),
      ...argv,
    ])}`;
  }

  isGone(stderr: string): boolean {
    return stderr.includes(GONE_MARK);
  }

  /** Only root exists in the container (the SSH user, remapped): any other user is CAPABILITY_UNSUPPORTED. */
  userFlags(uid: number, gid: number, user: string): string[] {
    if (uid !== 0 || gid !== 0)
      throw new GymError(
        'CAPABILITY_UNSUPPORTED',
        `the enroot provider runs commands as root only (enroot maps one user into a container), not as ${user}`,
        { details: { provider: 'enroot', capability: 'otherUsers' } },
      );
    return [];
  }

  /** Enroot has no memory limit, so a SIGKILL is never an OOM kill of ours: a kill, unless the sandbox died. */
  async abnormalEnd(host: Host, id: string): Promise<AbnormalEnd> {
    return (await this.#access.exists(host, id)) ? 'killed' : 'sandbox_gone';
  }

  /** The keeper's pid namespace, only while the keeper is the one we started (its pid not reused). */
  async killScope(_host: Host, keeper: Keeper): Promise<Runtime.KillScope> {
    return { namespace: `/proc/${keeper.pid}/ns/pid_for_children`, guard: keeperGuard(keeper, 'exit 0') };
  }

  /** Every process of the sandbox's pid namespace but its init (the keeper's child). */
  async stopLine(host: Host, _id: string, keeper: Keeper): Promise<string> {
    const stop = hostStopScriptArgv(host.busyboxPath, `/proc/${keeper.pid}/ns/pid_for_children`, 0);
    return [
      keeperGuard(keeper, GONE),
      // The children file ends without a newline: read fails at its end though it read the pid.
      `read -r init rest < /proc/${keeper.pid}/task/${keeper.pid}/children; [ -n "$init" ] || exit 255`,
      // The init's host pid is read there, in place of the placeholder argument.
      `exec ${shellJoin(stop.slice(0, -1))} "$init"`,
    ].join('\n');
  }

  /**
   * Kills a sandbox's keeper and removes its container and state file. The keeper's child is the
   * init of the sandbox's pid namespace: every command dies with it; then the keeper itself, then
   * the root filesystem.
   */
  removeLine(host: Host, id: string): string {
    const name = this.#access.nameOf(id);
    return [
      this.#enrootFunction(host),
      `set -- ${shellJoin([name])}`,
      `keeper=$(${FIND_KEEPER})`,
      'if [ -n "$keeper" ]; then pid=${keeper%% *}',
      '  for child in $(cat /proc/$pid/task/*/children 2>/dev/null); do kill -9 $child 2>/dev/null; done',
      '  kill -9 $pid 2>/dev/null; i=0; while kill -0 $pid 2>/dev/null && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done',
      'fi',
      `enroot remove --force ${shellJoin([name])} >/dev/null 2>&1`,
      `rm -f ${shellJoin([this.#access.statePath(host, id)])}`,
    ].join('\n');
  }

  lost(id: string): void {
    this.#keepers.delete(id);
  }

  forget(id: string): void {
    this.#keepers.delete(id);
  }

  readonly images: Runtime.RuntimeImageFormat<EnrootHost> = {
    hostSuffix: '.sqsh',
    hostTest: '-f',
    cacheSuffix: '.sqsh',
    keepRootfs: (cacheFile, rootfs) => squash(cacheFile, rootfs),
    unpackLine: (partial, target) =>
      `mkdir -p ${shellJoin([posix.dirname(target)])} && cat > ${shellJoin([partial])}`,
    derivedSteps: (host, source, basePath, partial, environment) =>
      this.#derivedSteps(host, source, basePath, partial, environment),
  };

  /**
   * A derived image: `enroot create` of the base, the files written into its root filesystem's
   * working directory, the command run there by `enroot start --root --rw` in a network
   * namespace of its own, then `enroot export` to the image's `.sqsh`. Enroot's hooks change the
   * root filesystem at every start, before the command, and `export` would keep that (the SSH
   * user's passwd and group lines, doubled root lines, an apt configuration file, the user's home
   * folder): the base's state of those is kept aside on the host and put back first thing in the
   * build, so the image holds the base and its command's changes only, as a Docker build's does.
   */
  #derivedSteps(
    host: Host,
    source: DerivedImageSource,
    basePath: string,
    partial: string,
    environment: string[],
  ) {
    const name = `gym-build-${randomBytes(6).toString('hex')}`;
    const rootfs = posix.join(host.workDirectory, 'enroot', 'data', name);
    const inside = posix.join(rootfs, source.workdir);
    const remove = `${this.#enroot(host, ['remove', '--force', name])} >/dev/null`;
    const aside = posix.join(rootfs, HOOKS_ASIDE);
    return {
      prepare: `${this.#makeFolders(host)} && ${this.#enroot(host, ['create', '--name', name, basePath])} >/dev/null && ${keepAside(rootfs, aside)} && mkdir -p ${shellJoin([inside])} && tar -x --no-same-owner -C ${shellJoin([inside])}`,
      run: `cd / && ${this.#enroot(host, [
        ...['start', '--root', '--rw', '--mount', `${host.busyboxPath}:${TOOLS}:none:x-create=file,bind,ro`],
        name,
        ...[TOOLS, 'unshare', '-n', '--', TOOLS, 'env', '-i', ...environment, TOOLS, 'sh', '-c'],
        // 126: a shell's "cannot run", for a working directory the sandbox lacks.
        `${PUT_BACK} cd "$1" || exit 126; shift; exec "$@"`,
        ...['gym-build', source.workdir, '/bin/sh', '-c', source.command],
      ])} </dev/null`,
      // The empty file enroot made for the busybox mount goes before the export.
      seal: `rm -rf ${shellJoin([posix.join(rootfs, '.gym-tools')])} && ${this.#enroot(host, ['export', '--output', partial, name])} >/dev/null && ${remove}`,
      cleanup: `${remove} 2>&1; rm -f ${shellJoin([partial])}`,
    };
  }
}

/**
 * The builder's root filesystem as a `.sqsh`, made here once per reference (content-addressed:
 * one made before stays right): unpacked (device nodes left out, as `enroot export` leaves /dev
 * out), then mksquashfs with every file owned by root, as `enroot export` makes them (only one
 * user exists in an enroot container).
 */
async function squash(cacheFile: string, rootfs: Readable): Promise<void> {
  const isMade = await stat(cacheFile).then(
    (found) => found.isFile(),
    () => false,
  );
  if (isMade) return void rootfs.resume();
  const work = await mkdtemp(`${cacheFile.slice(0, -'.sqsh'.length)}.unpack-`);
  try {
    await makeBeside(cacheFile, async (partial) => {
      await runLocal(
        'tar',
        ['-x', '--no-same-owner', '--exclude=./dev/*', '--exclude=dev/*', '-C', work],
        rootfs,
      );
      // Enroot's own default squash options: data blocks uncompressed, several times faster to make.
      await runLocal('mksquashfs', [
        work,
        partial,
        ...'-all-root -noappend -no-progress -quiet -comp lzo -noD'.split(' '),
      ]);
    });
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

export class EnrootProvider extends SshRuntimeProvider<EnrootHost, Keeper> {
  constructor(options: unknown, context: ProviderContext) {
    const parsed = EnrootOptionsSchema.parse(options);
    super(
      EnrootHostSchema,
      parsed,
      context,
      (access) => new EnrootDriver(access, parsed.startTimeoutSeconds),
    );
  }
}
