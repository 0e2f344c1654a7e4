/**
 * A STAND-IN for the `apptainer` command, for tests only: Apptainer cannot be installed on our
 * machines (not in Debian, not on the npm registry). It accepts exactly the subcommands and flags
 * the apptainer provider uses, with Apptainer's documented output formats and exit codes, and
 * rejects every other flag loudly (`FATAL:`, exit 255), so a provider that calls something the
 * real tool does not have fails its tests. Run as `node apptainer.ts ...` (test/stand-ins/bin
 * holds an `apptainer` wrapper that does so).
 *
 * What it does: an instance is a keeper process under bubblewrap (its own mount, pid, IPC and
 * UTS namespaces, and a network namespace with loopback only under `--net --network none`) over
 * an overlay of a sandbox-directory image whose writes are discarded at stop (as
 * `--writable-tmpfs`); `exec instance://NAME` enters the keeper's namespaces and root with
 * nsenter. Privileges follow Apptainer's rules for root (the stand-in always runs as root):
 * without `--no-privs` a process has every capability ("root default capabilities = full");
 * `--no-privs` on `instance start` drops them from the instance's own processes (bubblewrap's
 * `--cap-drop ALL`), and on `exec` from that command (an exec into an instance decides its own
 * privileges: Apptainer recomputes root's capabilities at each join), with no_new_privs;
 * `exec --security uid:N,gid:N` runs the command as that uid and gid with no capabilities.
 * As Apptainer 1.4 does, `instance start` refuses an image (binds counted) without an executable
 * `/.singularity.d/actions/start` and `/.singularity.d/startscript` (`apptainer build` puts them
 * in; a plain root filesystem has none, and the instance would end at once); the stand-in's own
 * keeper keeps the instance, so it runs neither.
 * Instance records live where Apptainer keeps them: `$APPTAINER_CONFIGDIR or ~/.apptainer` +
 * `/instances/app/<hostname>/<user>/<name>/<name>.json`.
 *
 * What it does not reproduce: SIF files (only sandbox directories are images), `--fakeroot`
 * user namespaces, cgroups v2 (`--memory`, `--memory-swap`, `--cpus` and `--pids-limit` are
 * applied through cgroups v1, as root), bridge networking, `--security` other than uid and gid,
 * `--keep-privs`/`--add-caps`/`--drop-caps`, a capability bounding set emptied as Apptainer's is
 * (the stand-in's keeps the few it needs to enter the instance, with none permitted),
 * `%startscript`, instance logs' content, the 64 MiB cap of `--writable-tmpfs` (writes go to
 * disk), and running as a non-root user (the stand-in needs root for mount and nsenter).
 */
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmdirSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { hostname, userInfo } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { standInCli } from './stand-in-cli.ts';

const INSTANCE_NAME = /^[a-zA-Z0-9._-]+$/;
/** The project's static init (scripts/setup.sh builds it): the instance's PID 1. */
const KEEPER = fileURLToPath(new URL('../../.tools/gym-exec', import.meta.url));

const cli = standInCli({ name: 'apptainer', prefix: 'FATAL:   ', failCode: 255, endOfFlags: false });
// Typed here: a call to it then ends the control flow for the checker too.
const fatal: (message: string) => never = cli.fail;
const { parseFlags, runToEnd } = cli;

interface InstanceRecord {
  name: string;
  pid: number;
  image: string;
  root: string;
  network: boolean;
  /** The instance's cgroups, when it was started with limits. */
  cgroups: string[];
}

/** Apptainer's size syntax: bytes, or a number with k, m, g (case-insensitive, optional b). */
function parseSize(text: string): number {
  const match = /^(\d+)([kmg]?)b?$/i.exec(text);
  if (match === null) fatal(`invalid size ${text}`);
  const scale = { '': 1, k: 1024, m: 1024 ** 2, g: 1024 ** 3 }[
    match[2]!.toLowerCase() as '' | 'k' | 'm' | 'g'
  ];
  return Number(match[1]) * scale;
}

/**
 * The instance's cgroups (v1 here: memory, pids, cpu), made when it asks for limits; every
 * process of the instance (the keeper, each exec) enters them before it starts.
 */
function cgroupPaths(name: string): string[] {
  const leaf = `apptainer-standin-${hostname()}-${name}`;
  return ['memory', 'pids', 'cpu'].map((controller) => join('/sys/fs/cgroup', controller, leaf));
}

function makeCgroups(
  name: string,
  limits: { memory?: number; memorySwap?: number; cpus?: number; pids?: number },
): string[] {
  if (existsSync('/sys/fs/cgroup/cgroup.controllers'))
    fatal('stand-in: cgroup limits are reproduced on cgroups v1 only');
  const [memory, pids, cpu] = cgroupPaths(name) as [string, string, string];
  for (const path of [memory, pids, cpu]) mkdirSync(path, { recursive: true });
  if (limits.memory !== undefined) {
    writeFileSync(join(memory, 'memory.limit_in_bytes'), String(limits.memory));
    try {
      writeFileSync(join(memory, 'memory.memsw.limit_in_bytes'), String(limits.memorySwap ?? limits.memory));
    } catch {}
  }
  if (limits.pids !== undefined) writeFileSync(join(pids, 'pids.max'), String(limits.pids));
  if (limits.cpus !== undefined) {
    writeFileSync(join(cpu, 'cpu.cfs_period_us'), '100000');
    writeFileSync(join(cpu, 'cpu.cfs_quota_us'), String(Math.round(limits.cpus * 100000)));
  }
  return [memory, pids, cpu];
}

function removeCgroups(name: string): void {
  for (const path of cgroupPaths(name)) {
    for (let attempt = 0; attempt < 50 && existsSync(path); attempt += 1) {
      try {
        rmdirSync(path);
      } catch {
        execFileSync('sleep', ['0.02']);
      }
    }
  }
}

/** A shell line that enters the cgroups, then runs argv in their place. */
function inCgroups(paths: string[], argv: string[]): string[] {
  if (paths.length === 0) return argv;
  const quote = (word: string) => `'${word.replace(/'/g, `'\\''`)}'`;
  const enter = paths.map((path) => `echo $$ > ${quote(join(path, 'cgroup.procs'))}`).join(' && ');
  return ['/bin/sh', '-c', `${enter} && exec ${argv.map(quote).join(' ')}`];
}

function configDirectory(): string {
  return process.env.APPTAINER_CONFIGDIR ?? join(userInfo().homedir, '.apptainer');
}

function instanceDirectory(name: string): string {
  return join(configDirectory(), 'instances', 'app', hostname(), userInfo().username, name);
}

function logPaths(name: string) {
  const base = join(configDirectory(), 'instances', 'logs', hostname(), userInfo().username);
  return { out: join(base, `${name}.out`), err: join(base, `${name}.err`) };
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

function readRecord(name: string): InstanceRecord | null {
  try {
    const record = JSON.parse(
      readFileSync(join(instanceDirectory(name), `${name}.json`), 'utf8'),
    ) as InstanceRecord;
    return isAlive(record.pid) ? record : null;
  } catch {
    return null;
  }
}

/** Parses `args` against the flags a subcommand allows: `value` flags take the next word. */
function alias(flags: Map<string, string[]>, short: string, long: string): boolean {
  return flags.has(short) || flags.has(long);
}

/** `--env NAME=VALUE` (repeatable) over `base`, as Apptainer takes them. */
function withEnv(flags: Map<string, string[]>, base: Record<string, string>): Record<string, string> {
  const env = { ...base };
  for (const pair of flags.get('--env') ?? []) {
    const at = pair.indexOf('=');
    if (at <= 0) fatal(`invalid --env ${pair}: expected NAME=VALUE`);
    env[pair.slice(0, at)] = pair.slice(at + 1);
  }
  return env;
}

/**
 * `-B/--bind src[:dst[:ro|rw]]`, repeatable and comma-separated, as Apptainer takes them, as
 * bubblewrap's arguments. A source that does not exist fails as Apptainer's mount hook does.
 */
function bindArguments(flags: Map<string, string[]>): string[] {
  const binds = [...(flags.get('-B') ?? []), ...(flags.get('--bind') ?? [])].flatMap((list) =>
    list.split(','),
  );
  return binds.flatMap((bind) => {
    const [source = '', target, mode = 'rw'] = bind.split(':');
    const destination = target ?? source;
    if (source === '' || !destination.startsWith('/')) fatal(`invalid bind ${bind}`);
    if (mode !== 'ro' && mode !== 'rw') fatal(`invalid bind option ${mode} in ${bind}: only ro and rw`);
    if (!existsSync(source))
      fatal(`mount hook function failure: mount ${source}->${destination} error: no such file or directory`);
    return [mode === 'ro' ? '--ro-bind' : '--bind', source, destination];
  });
}

async function instanceStart(args: string[]): Promise<void> {
  const { flags, rest } = parseFlags('instance start', args, {
    '-C': 'switch',
    '--containall': 'switch',
    '-e': 'switch',
    '--cleanenv': 'switch',
    '--writable-tmpfs': 'switch',
    '--no-home': 'switch',
    '-n': 'switch',
    '--net': 'switch',
    '--network': 'value',
    '--pid-file': 'value',
    '--env': 'repeat',
    '--hostname': 'value',
    '-B': 'repeat',
    '--bind': 'repeat',
    '--memory': 'value',
    '--memory-swap': 'value',
    '--cpus': 'value',
    '--pids-limit': 'value',
    '--no-privs': 'switch',
  });
  const [image, name, ...extra] = rest;
  if (image === undefined || name === undefined)
    fatal('usage: apptainer instance start [options] <container path> <instance name>');
  if (extra.length > 0) fatal('stand-in: instance arguments (%startscript) are not supported');
  if (!INSTANCE_NAME.test(name)) fatal(`instance name ${name} is not valid: only [a-zA-Z0-9._-] are allowed`);
  if (readRecord(name) !== null) fatal(`instance ${name} already exists`);
  if (!alias(flags, '-C', '--containall')) fatal('stand-in: only --containall instances are supported');
  if (!flags.has('--writable-tmpfs')) fatal('stand-in: only --writable-tmpfs instances are supported');
  const wantsNet = alias(flags, '-n', '--net');
  const network = flags.get('--network')?.[0];
  if (network !== undefined && !wantsNet) fatal('--network requires --net');
  if (wantsNet && network !== 'none')
    fatal('stand-in: only --net --network none is supported (bridge networking needs privileges)');
  if (!existsSync(KEEPER)) fatal(`stand-in: ${KEEPER} is missing (scripts/setup.sh builds it)`);
  if (!existsSync(join(image, 'bin')) && !existsSync(join(image, 'usr'))) {
    if (image.endsWith('.sif'))
      fatal(`stand-in: SIF files are not supported, only sandbox directories: ${image}`);
    fatal(`could not open image ${image}: failed to retrieve path for ${image}: no such file or directory`);
  }
  const bindArgs = bindArguments(flags);
  // Apptainer 1.4 runs its start action in the instance, and the instance ends when nothing runs
  // in it any more: an image (or a bind) must give /.singularity.d/actions/start, and a
  // /.singularity.d/startscript that keeps running (the stand-in's keeper does the keeping; it
  // only checks that one is there and executable). A plain root filesystem has neither.
  const bound = new Map<string, string>();
  for (let index = 0; index < bindArgs.length; index += 3)
    bound.set(bindArgs[index + 2]!, bindArgs[index + 1]!);
  const provided = (path: string) => {
    const file = bound.get(path) ?? join(image, path);
    return spawnSync('test', ['-x', file]).status === 0;
  };
  if (!provided('/.singularity.d/actions/start')) {
    fatal(
      'exec /.singularity.d/actions/start failed: fork/exec /.singularity.d/actions/start: no such file or directory',
    );
  }
  if (!provided('/.singularity.d/startscript')) {
    fatal(`while executing starter: failed to start instance: while running starter: exit status 146`);
  }
  const directory = instanceDirectory(name);
  mkdirSync(directory, { recursive: true });
  const root = join(directory, 'root');
  for (const part of ['upper', 'work', 'root']) mkdirSync(join(directory, part), { recursive: true });
  execFileSync('mount', [
    '-t',
    'overlay',
    'overlay',
    '-o',
    `lowerdir=${image},upperdir=${join(directory, 'upper')},workdir=${join(directory, 'work')}`,
    root,
  ]);
  const logs = logPaths(name);
  mkdirSync(join(logs.out, '..'), { recursive: true });
  const busybox = '/bin/busybox';
  // Mount points Apptainer makes for binds are open to every user (bubblewrap's would be 0700).
  for (let index = 0; index < bindArgs.length; index += 3)
    mkdirSync(join(root, dirname(bindArgs[index + 2]!)), { recursive: true, mode: 0o755 });
  const bwrap = [
    '--bind',
    root,
    '/',
    '--dev',
    '/dev',
    '--proc',
    '/proc',
    // A private /tmp, writable by every user as on a host (Apptainer's --contain).
    '--perms',
    '1777',
    '--tmpfs',
    '/tmp',
    '--ro-bind',
    busybox,
    '/.standin/busybox',
    '--ro-bind',
    KEEPER,
    '/.standin/keeper',
    ...bindArgs,
    // With --net the instance's network namespace (made below) has its own sysfs; without, the
    // host's network and /sys are shared, as Apptainer shares them.
    ...(wantsNet ? [] : ['--ro-bind', '/sys', '/sys']),
    // Root keeps every capability in the instance unless --no-privs drops them (and sets no_new_privs,
    // as bubblewrap always does).
    ...(flags.has('--no-privs') ? ['--cap-drop', 'ALL'] : []),
    '--unshare-pid',
    '--unshare-ipc',
    '--unshare-uts',
    '--hostname',
    flags.get('--hostname')?.[0] ?? name.slice(0, 63),
    '--new-session',
    // The keeper is the instance's first process, as Apptainer's own init is: it reaps orphans,
    // and nothing in the instance can signal it.
    '--as-pid-1',
    '--info-fd',
    '3',
    '--',
    '/.standin/keeper',
    '--keeper',
  ];
  const memory = flags.get('--memory')?.[0];
  const memorySwap = flags.get('--memory-swap')?.[0];
  const cpus = flags.get('--cpus')?.[0];
  const pids = flags.get('--pids-limit')?.[0];
  if (cpus !== undefined && !(Number(cpus) > 0)) fatal(`invalid --cpus ${cpus}`);
  if (pids !== undefined && !/^\d+$/.test(pids)) fatal(`invalid --pids-limit ${pids}`);
  const limited = [memory, memorySwap, cpus, pids].some((value) => value !== undefined);
  const cgroups = limited
    ? makeCgroups(name, {
        ...(memory === undefined ? {} : { memory: parseSize(memory) }),
        ...(memorySwap === undefined ? {} : { memorySwap: parseSize(memorySwap) }),
        ...(cpus === undefined ? {} : { cpus: Number(cpus) }),
        ...(pids === undefined ? {} : { pids: Number(pids) }),
      })
    : [];
  const infoPath = join(directory, 'info.json');
  const info = openSync(infoPath, 'w');
  mkdirSync(join(root, 'sys'), { recursive: true });
  const quote = (word: string) => `'${word.replace(/'/g, `'\\''`)}'`;
  const launcher = wantsNet
    ? [
        'unshare',
        '--mount',
        '--net',
        '--propagation',
        'private',
        '/bin/sh',
        '-c',
        // Loopback only, and up, as Apptainer's "none" network gives it.
        `mount -t sysfs -o ro,nosuid,nodev,noexec sysfs ${quote(join(root, 'sys'))} && /bin/busybox ip link set lo up && exec ${['bwrap', ...bwrap].map(quote).join(' ')}`,
      ]
    : ['bwrap', ...bwrap];
  const [keeperCommand, ...keeperArgs] = inCgroups(cgroups, launcher);
  const keeper = spawn(keeperCommand!, keeperArgs, {
    detached: true,
    stdio: ['ignore', openSync(logs.out, 'a'), openSync(logs.err, 'a'), info],
  });
  keeper.unref();
  // bwrap writes {"child-pid": N} once the namespaces exist; N is the keeper inside them.
  const deadline = Date.now() + 10_000;
  let childPid = 0;
  while (Date.now() < deadline && childPid === 0) {
    try {
      childPid = (JSON.parse(readFileSync(infoPath, 'utf8')) as { 'child-pid': number })['child-pid'];
    } catch {
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    if (keeper.exitCode !== null) break;
  }
  // bwrap tells the pid before its child has set up the root: ready once the child is the keeper.
  const isKeeper = () => {
    try {
      return readlinkSync(`/proc/${childPid}/exe`) === '/.standin/keeper';
    } catch {
      return false;
    }
  };
  while (childPid !== 0 && Date.now() < deadline && !isKeeper() && keeper.exitCode === null)
    await new Promise((resolve) => setTimeout(resolve, 10));
  if (childPid !== 0 && !isKeeper()) childPid = 0;
  if (childPid === 0) {
    execFileSync('umount', ['-l', root]);
    rmSync(directory, { recursive: true, force: true });
    removeCgroups(name);
    fatal(`failed to start instance ${name}: ${readFileSync(logs.err, 'utf8').slice(-500)}`);
  }
  const record: InstanceRecord = { name, pid: childPid, image, root, network: wantsNet, cgroups };
  writeFileSync(join(directory, `${name}.json`), JSON.stringify(record));
  const pidFile = flags.get('--pid-file')?.[0];
  if (pidFile !== undefined) writeFileSync(pidFile, `${childPid}\n`);
  process.stdout.write(`INFO:    instance started successfully\n`);
}

/**
 * `exec --writable DIR cmd`: a command in a writable sandbox directory (how an image is changed
 * before it is used), contained (`--containall`), no network unless asked, binds as at start but
 * onto mount points the directory must already have (Apptainer makes none in a writable image).
 */
function writableExec(flags: Map<string, string[]>, directory: string, command: string[]): void {
  if (!alias(flags, '-C', '--containall')) fatal('stand-in: only --containall is supported with --writable');
  if (!(alias(flags, '-n', '--net') && flags.get('--network')?.[0] === 'none'))
    fatal('stand-in: only --net --network none is supported with --writable');
  if (!existsSync(join(directory, 'bin')) && !existsSync(join(directory, 'usr')))
    fatal(`could not open image ${directory}: not a sandbox directory`);
  const env = withEnv(flags, { PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' });
  const bindArgs = bindArguments(flags);
  // A writable image gets no overlay: Apptainer cannot make a bind's mount point in it.
  for (let index = 0; index < bindArgs.length; index += 3) {
    const [source, destination] = [bindArgs[index + 1]!, bindArgs[index + 2]!];
    if (!existsSync(join(directory, destination)))
      fatal(
        `container creation failed: mount hook function failure: mount ${source}->${destination} error: while mounting ${source}: destination ${destination} doesn't exist in container`,
      );
  }
  const cwd = flags.get('--pwd')?.[0] ?? flags.get('--cwd')?.[0] ?? '/';
  runToEnd('bwrap', [
    '--bind',
    directory,
    '/',
    '--dev',
    '/dev',
    '--proc',
    '/proc',
    '--perms',
    '1777',
    '--tmpfs',
    '/tmp',
    ...bindArgs,
    ...(flags.has('--no-privs') ? ['--cap-drop', 'ALL'] : []),
    '--unshare-all',
    '--die-with-parent',
    '--new-session',
    '--chdir',
    cwd,
    '--clearenv',
    ...Object.entries(env).flatMap(([key, value]) => ['--setenv', key, value]),
    '--',
    ...command,
  ]);
}

/**
 * `--security uid:N,gid:N` (repeatable, comma-separated), as root gives it: the command runs as
 * that uid and gid, with no capabilities. Only uid and gid (one of each) are modelled; SELinux,
 * AppArmor and seccomp options are refused. Null without the flag.
 */
function securityIds(flags: Map<string, string[]>): { uid: number; gid: number } | null {
  const options = (flags.get('--security') ?? []).flatMap((value) => value.split(','));
  if (options.length === 0) return null;
  const ids: { uid?: number; gid?: number } = {};
  for (const option of options) {
    const match = /^(uid|gid):(\d+)$/.exec(option);
    if (match === null) fatal(`stand-in: --security ${option} is not modelled (only uid:N and gid:N)`);
    ids[match[1] as 'uid' | 'gid'] = Number(match[2]);
  }
  if (ids.uid === undefined || ids.gid === undefined)
    fatal('stand-in: --security is modelled with both uid:N and gid:N');
  return { uid: ids.uid, gid: ids.gid };
}

function instanceExec(args: string[]): void {
  const { flags, rest } = parseFlags('exec', args, {
    '-e': 'switch',
    '--cleanenv': 'switch',
    '--pwd': 'value',
    '--cwd': 'value',
    '--env': 'repeat',
    '-w': 'switch',
    '--writable': 'switch',
    '-C': 'switch',
    '--containall': 'switch',
    '--no-home': 'switch',
    '-n': 'switch',
    '--net': 'switch',
    '--network': 'value',
    '-B': 'repeat',
    '--bind': 'repeat',
    '--no-privs': 'switch',
    '--security': 'repeat',
  });
  const [target, ...command] = rest;
  if (target === undefined || command.length === 0)
    fatal('usage: apptainer exec [exec options...] <container> <command>');
  const ids = securityIds(flags);
  if (alias(flags, '-w', '--writable')) {
    if (target.startsWith('instance://')) fatal('--writable cannot be used with an instance');
    if (ids !== null) fatal('stand-in: --security uid/gid is modelled for exec into an instance only');
    writableExec(flags, target, command);
    return;
  }
  for (const flag of ['-C', '--containall', '--no-home', '-n', '--net', '--network', '-B', '--bind'])
    if (flags.has(flag)) fatal(`stand-in: ${flag} applies to an instance at its start, not to exec into it`);
  if (!target.startsWith('instance://'))
    fatal('stand-in: exec runs only in instances (instance://NAME) or --writable directories');
  const name = target.slice('instance://'.length);
  const record = readRecord(name);
  if (record === null) fatal(`no instance found with name ${name}`);
  const env = withEnv(
    flags,
    alias(flags, '-e', '--cleanenv')
      ? { PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' }
      : (process.env as Record<string, string>),
  );
  env.APPTAINER_INSTANCE = name;
  env.APPTAINER_CONTAINER = record.image;
  env.APPTAINER_NAME = name;
  const cwd = flags.get('--pwd')?.[0] ?? flags.get('--cwd')?.[0] ?? '/';
  // Busybox's nsenter, not util-linux's: the latter stops itself when its child is stopped (job
  // control), and a kill that stops then kills the child would leave it stopped for good. The
  // working directory is set inside the instance's root (nsenter's -w resolves it outside).
  const unprivileged = flags.has('--no-privs') || ids !== null;
  // Without privileges the command gets no capability and no way to one (no_new_privs, set
  // first), yet nsenter needs CAP_SYS_ADMIN, CAP_SYS_CHROOT and CAP_SYS_PTRACE (the keeper is not
  // dumpable) to enter the instance, and CAP_SETUID/CAP_SETGID to become uid:gid. Those alone pass
  // as ambient capabilities under the locked "noroot" securebits (uid 0 gains nothing at exec);
  // inside the instance they are lost at the change of uid (the inheritable set keeps them, which
  // grants nothing under no_new_privs), or, for root, cleared by the busybox bound at start before
  // the command runs. util-linux setpriv on the host sets all this up.
  const keep = ['sys_admin', 'sys_chroot', 'sys_ptrace', ...(ids === null ? [] : ['setuid', 'setgid'])];
  const drop = unprivileged
    ? [
        'setpriv',
        '--no-new-privs',
        '--securebits',
        '+noroot,+noroot_locked',
        '--bounding-set',
        `-all,${keep.map((cap) => `+${cap}`).join(',')}`,
        '--inh-caps',
        `-all,${keep.map((cap) => `+${cap}`).join(',')}`,
        '--ambient-caps',
        keep.map((cap) => `+${cap}`).join(','),
      ]
    : [];
  const shed =
    ids !== null
      ? ['/.standin/busybox', 'nsenter', '-S', String(ids.uid), '-G', String(ids.gid), '--']
      : unprivileged
        ? [
            '/.standin/busybox',
            'setpriv',
            '--inh-caps',
            keep.map((cap) => `-${cap}`).join(','),
            '--ambient-caps',
            keep.map((cap) => `-${cap}`).join(','),
          ]
        : [];
  const [program, ...programArgs] = inCgroups(record.cgroups ?? [], [
    ...drop,
    '/bin/busybox',
    'nsenter',
    '-t',
    String(record.pid),
    '-m',
    '-p',
    '-i',
    '-u',
    '-n',
    '-r',
    '/.standin/busybox',
    'sh',
    '-c',
    'cd "$1" || { echo "FATAL:   could not set the working directory $1" >&2; exit 255; }; shift; exec "$@"',
    'pwd',
    cwd,
    ...shed,
    ...command,
  ]);
  runToEnd(program!, programArgs, env);
}

function instanceStop(args: string[]): void {
  const { flags, rest } = parseFlags('instance stop', args, {
    '-F': 'switch',
    '--force': 'switch',
    '-t': 'value',
    '--timeout': 'value',
    '-s': 'value',
    '--signal': 'value',
  });
  const [name] = rest;
  if (name === undefined) fatal('usage: apptainer instance stop [stop options...] <instance name>');
  const directory = instanceDirectory(name);
  const record = (() => {
    try {
      return JSON.parse(readFileSync(join(directory, `${name}.json`), 'utf8')) as InstanceRecord;
    } catch {
      return null;
    }
  })();
  if (record === null) fatal(`no instance found with name ${name}`);
  // The keeper is the first process of its pid namespace: everything in the instance dies with it.
  const signal = alias(flags, '-F', '--force')
    ? 'SIGKILL'
    : (flags.get('-s')?.[0] ?? flags.get('--signal')?.[0] ?? 'SIGKILL');
  try {
    process.kill(
      record.pid,
      signal.startsWith('SIG') ? (signal as NodeJS.Signals) : (`SIG${signal}` as NodeJS.Signals),
    );
  } catch {}
  const deadline = Date.now() + 10_000;
  while (isAlive(record.pid) && Date.now() < deadline) execFileSync('sleep', ['0.02']);
  try {
    execFileSync('umount', ['-l', record.root], { stdio: 'ignore' });
  } catch {}
  rmSync(directory, { recursive: true, force: true });
  removeCgroups(name);
  process.stdout.write(`INFO:    Stopping ${name} instance of ${record.image} (PID=${record.pid})\n`);
}

function instanceList(args: string[]): void {
  const { flags, rest } = parseFlags('instance list', args, { '-j': 'switch', '--json': 'switch' });
  if (rest.length > 0) fatal('stand-in: instance list takes no name pattern here');
  const base = join(configDirectory(), 'instances', 'app', hostname(), userInfo().username);
  const names = existsSync(base) ? readdirSync(base) : [];
  const instances = names.flatMap((name) => {
    const record = readRecord(name);
    if (record === null) return [];
    const logs = logPaths(name);
    return [
      {
        instance: name,
        pid: record.pid,
        img: record.image,
        ip: '',
        logErrPath: logs.err,
        logOutPath: logs.out,
      },
    ];
  });
  if (alias(flags, '-j', '--json')) {
    process.stdout.write(`${JSON.stringify({ instances }, null, '\t')}\n`);
    return;
  }
  process.stdout.write('INSTANCE NAME    PID      IP    IMAGE\n');
  for (const entry of instances)
    process.stdout.write(`${entry.instance}    ${entry.pid}        ${entry.img}\n`);
}

const [command, ...args] = process.argv.slice(2);
if (command === '--version' || command === 'version')
  process.stdout.write('apptainer version 1.3.6-standin\n');
else if (command === 'exec') instanceExec(args);
else if (command === 'instance') {
  const [sub, ...subArgs] = args;
  if (sub === 'start') await instanceStart(subArgs);
  else if (sub === 'stop') instanceStop(subArgs);
  else if (sub === 'list') instanceList(subArgs);
  else fatal(`stand-in: unknown instance subcommand ${sub ?? '(none)'}`);
} else fatal(`stand-in: unknown command ${command ?? '(none)'}`);
