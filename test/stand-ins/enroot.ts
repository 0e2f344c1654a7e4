/**
 * A STAND-IN for the `enroot` command (Enroot 4.1.2's interface), for tests only: Enroot cannot
 * be installed on our machines (not in Debian, not on the npm registry). It accepts exactly the
 * subcommands and flags the enroot provider uses, with Enroot's documented output formats and exit
 * codes (`[ERROR] ...` and exit 1), and rejects every other flag loudly, so a provider that calls
 * something the real tool does not have fails its tests. Run as `node enroot.ts ...` (the test
 * nodes put an `enroot` wrapper that does so on their PATH).
 *
 * What it does, as Enroot 4.1.2 does it:
 * - `create [--name NAME] IMAGE.sqsh` unpacks the squashfs image with unsquashfs into
 *   `$ENROOT_DATA_PATH/NAME`; `export [--output FILE] NAME` squashes it back with mksquashfs
 *   (every file owned by root, /dev left out, ENROOT_SQUASH_OPTIONS or Enroot's default
 *   `-comp lzo -noD -exit-on-error`); `remove --force NAME` deletes it.
 * - `start [--root] [--rw] [--mount SRC:DST:TYPE:OPTS] [--env K=V] NAME CMD...` runs CMD in the
 *   foreground under bubblewrap with a user namespace (the caller mapped to root with `--root`,
 *   keeping its capabilities there, as enroot-switchroot does for uid 0) and a mount namespace
 *   only: the host's network, pid and IPC namespaces, the host's /proc, /dev and a read-only /sys
 *   bound in, a tmpfs /tmp, the root filesystem read-only unless `--rw`, `/etc/rc` run when the
 *   image has one. A `.lock` file in the root filesystem marks it, as Enroot's does.
 *   With ENROOT_ALLOW_SUPERUSER (anything but no/false; as enroot.conf's setting would) root
 *   gets no user namespace: the container is root of the host with every capability.
 * - `exec [--env K=V] PID CMD...` joins the user and mount namespaces of PID with nsenter, in its
 *   working directory, with its environment plus the `--env` ones (the user namespace only when
 *   it is not the caller's, as enroot-nsenter skips its own). Like enroot-nsenter, which reads the
 *   environment `enroot exec` hands it as `/proc/self/fd/N` only after joining the mount
 *   namespace, it fails when the /proc there is of a pid namespace the caller is not in.
 * - `start` and `exec` need enroot's helpers (enroot-nsenter, and for `start` enroot-mount and
 *   enroot-switchroot) on PATH, as Enroot runs them by name (exit 127 otherwise); it runs none.
 * - `list [--fancy]` lists the root filesystems; `--fancy` adds, per container, the processes
 *   whose root is its root filesystem (lowest PID per mount namespace, as `lsns` gives them) in
 *   Enroot's columns `NAME PID COMM STATE STARTED TIME MNTNS USERNS COMMAND`, and the processes of
 *   every other enroot container on the machine (another data path's) under `<unknown>`.
 * - `start` runs Enroot's standard hooks and its command through the container's shell, a login
 *   shell unless ENROOT_LOGIN_SHELL says no (`enroot-start.ts`).
 *
 * Stricter than Enroot: ENROOT_RUNTIME_PATH, ENROOT_DATA_PATH, ENROOT_CACHE_PATH and
 * ENROOT_TEMP_PATH must all be set on every call (Enroot falls back to XDG directories), so a
 * provider that forgets them on one call fails its tests.
 *
 * What it does not reproduce: importing images (`import`, `load`, `bundle`, `batch`), starting a
 * `.sqsh` directly (squashfuse), `--conf` scripts, `--rc`, hooks other than the standard
 * 10-shadow and 10-aptfix (and their pwck/grpck pass), enroot.conf and environ.d,
 * mount types other than bind, `remove` without `--force` (Enroot prompts), running as a non-root
 * user (the stand-in runs as root and maps root to root), and the master branch's
 * `--pid`/`--net`/`--ipc`/`--uts` options (not in 4.1.2).
 */
import { execFileSync, spawnSync } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { dirname, join } from 'node:path';
import { isOn, runStandardHooks, switchedCommand } from './enroot-start.ts';
import { standInCli } from './stand-in-cli.ts';

const NAME = /^[^/]+$/;

const cli = standInCli({ name: 'enroot', prefix: '[ERROR] ', failCode: 1, endOfFlags: true });
// Typed here: a call to it then ends the control flow for the checker too.
const fail: (message: string) => never = cli.fail;
const { parseFlags, runToEnd } = cli;

/** Fails as one of enroot's C helpers does (`err(3)`: its name, the message, exit 1), with no `[ERROR]`. */
function helperFail(helper: string, message: string): never {
  process.stderr.write(`${helper}: ${message}\n`);
  process.exit(1);
}

/**
 * Fails, as enroot's bash does (exit 127), unless each of its C helpers a subcommand runs by name
 * is on PATH: `start` and `exec` run enroot-nsenter first, then `start` enroot-mount and
 * enroot-switchroot. The stand-in runs none of them; it only looks them up.
 */
function needHelpers(helpers: string[]): void {
  const folders = (process.env.PATH ?? '').split(':').filter(Boolean);
  for (const helper of helpers)
    if (!folders.some((folder) => spawnSync('test', ['-x', join(folder, helper)]).status === 0)) {
      process.stderr.write(`enroot: exec: ${helper}: not found\n`);
      process.exit(127);
    }
}

/** The four paths every call needs (see the top of this file). */
function paths() {
  const missing = ['ENROOT_RUNTIME_PATH', 'ENROOT_DATA_PATH', 'ENROOT_CACHE_PATH', 'ENROOT_TEMP_PATH'].filter(
    (name) => !process.env[name],
  );
  if (missing.length > 0) fail(`stand-in: ${missing.join(', ')} must be set on every call`);
  const data = process.env.ENROOT_DATA_PATH!;
  for (const path of [
    data,
    process.env.ENROOT_RUNTIME_PATH!,
    process.env.ENROOT_CACHE_PATH!,
    process.env.ENROOT_TEMP_PATH!,
  ])
    mkdirSync(path, { recursive: true });
  return { data };
}

function rootfsOf(data: string, name: string): string {
  if (!NAME.test(name)) fail(`Invalid argument: ${name}`);
  return join(data, name);
}

function create(args: string[]): void {
  const { flags, rest } = parseFlags('create', args, {
    '-n': { kind: 'value', long: 'name' },
    '--name': { kind: 'value', long: 'name' },
    '-f': { kind: 'switch', long: 'force' },
    '--force': { kind: 'switch', long: 'force' },
  });
  const { data } = paths();
  const [image, ...extra] = rest;
  if (image === undefined || extra.length > 0) fail('Invalid argument');
  if (!existsSync(image) || !statSync(image).isFile()) fail(`No such file or directory: ${image}`);
  if (spawnSync('unsquashfs', ['-s', image], { stdio: 'ignore' }).status !== 0)
    fail(`Invalid image format: ${image}`);
  const name = flags.get('name')?.[0] ?? image.replace(/^.*\//, '').replace(/\.sqsh$/, '');
  const rootfs = rootfsOf(data, name);
  if (existsSync(rootfs)) {
    if (!flags.has('force')) fail(`File already exists: ${rootfs}`);
    rmSync(rootfs, { recursive: true, force: true });
  }
  process.stderr.write('[INFO] Extracting squashfs filesystem...\n\n');
  const unpacked = spawnSync('unsquashfs', ['-no-progress', '-user-xattrs', '-d', rootfs, image], {
    stdio: ['ignore', 2, 2],
  });
  if (unpacked.status !== 0) fail(`unsquashfs failed for ${image}`);
}

function exportImage(args: string[]): void {
  const { flags, rest } = parseFlags('export', args, {
    '-o': { kind: 'value', long: 'output' },
    '--output': { kind: 'value', long: 'output' },
    '-f': { kind: 'switch', long: 'force' },
    '--force': { kind: 'switch', long: 'force' },
  });
  const { data } = paths();
  const [name, ...extra] = rest;
  if (name === undefined || extra.length > 0) fail('Invalid argument');
  const rootfs = rootfsOf(data, name);
  if (!existsSync(rootfs)) fail(`No such file or directory: ${rootfs}`);
  const output = flags.get('output')?.[0] ?? `${name}.sqsh`;
  if (existsSync(output)) {
    if (!flags.has('force')) fail(`File already exists: ${output}`);
    rmSync(output, { force: true });
  }
  process.stderr.write('[INFO] Creating squashfs filesystem...\n\n');
  const squashed = spawnSync(
    'mksquashfs',
    [
      rootfs,
      output,
      '-all-root',
      '-no-progress',
      // Enroot's default squash options (ENROOT_SQUASH_OPTIONS): no data compression, fast.
      ...(process.env.ENROOT_SQUASH_OPTIONS ?? '-comp lzo -noD -exit-on-error').split(/\s+/).filter(Boolean),
      '-wildcards',
      '-e',
      'dev/*',
      '.lock',
    ],
    { stdio: ['ignore', 2, 2] },
  );
  if (squashed.status !== 0) fail(`mksquashfs failed for ${rootfs}`);
}

function remove(args: string[]): void {
  const { flags, rest } = parseFlags('remove', args, {
    '-f': { kind: 'switch', long: 'force' },
    '--force': { kind: 'switch', long: 'force' },
  });
  const { data } = paths();
  if (rest.length === 0) fail('Invalid argument');
  if (!flags.has('force')) fail('stand-in: remove without --force prompts for confirmation; not reproduced');
  for (const name of rest) {
    const rootfs = rootfsOf(data, name);
    if (!existsSync(rootfs)) fail(`No such file or directory: ${rootfs}`);
    rmSync(rootfs, { recursive: true, force: true });
  }
}

/** Makes a mount target inside the root filesystem, as Enroot's `x-create=file|dir` does. */
function createTarget(rootfs: string, target: string, kind: 'file' | 'dir'): void {
  const path = join(rootfs, target);
  if (existsSync(path)) return;
  mkdirSync(kind === 'dir' ? path : dirname(path), { recursive: true });
  if (kind === 'file') writeFileSync(path, '');
}

function start(args: string[]): void {
  const { flags, rest } = parseFlags('start', args, {
    '-r': { kind: 'switch', long: 'root' },
    '--root': { kind: 'switch', long: 'root' },
    '-w': { kind: 'switch', long: 'rw' },
    '--rw': { kind: 'switch', long: 'rw' },
    '-m': { kind: 'repeat', long: 'mount' },
    '--mount': { kind: 'repeat', long: 'mount' },
    '-e': { kind: 'repeat', long: 'env' },
    '--env': { kind: 'repeat', long: 'env' },
  });
  const { data } = paths();
  const [name, ...command] = rest;
  if (name === undefined) fail('Invalid argument');
  needHelpers(['enroot-nsenter', 'enroot-mount', 'enroot-switchroot']);
  if (name.endsWith('.sqsh')) fail('stand-in: starting an image directly (squashfuse) is not reproduced');
  const rootfs = rootfsOf(data, name);
  if (!existsSync(rootfs) || !statSync(rootfs).isDirectory()) fail(`No such file or directory: ${rootfs}`);
  const extra: Record<string, string> = {};
  for (const pair of flags.get('env') ?? []) {
    if (!/^[A-Za-z_][A-Za-z0-9_]*(=|$)/.test(pair)) fail(`Invalid argument: ${pair}`);
    const at = pair.indexOf('=');
    if (at < 0) extra[pair] = process.env[pair] ?? '';
    else extra[pair.slice(0, at)] = pair.slice(at + 1);
  }
  // The system mounts (Enroot's mounts/10-system.fstab and 20-config.fstab), targets made first.
  for (const directory of ['proc', 'sys', 'dev', 'tmp']) createTarget(rootfs, directory, 'dir');
  const mounts = [
    '--bind',
    '/proc',
    '/proc',
    '--dev-bind',
    '/dev',
    '/dev',
    '--ro-bind',
    '/sys',
    '/sys',
    '--perms',
    '0755',
    '--tmpfs',
    '/tmp',
  ];
  for (const file of ['/etc/hosts', '/etc/hostname', '/etc/resolv.conf'])
    if (existsSync(file)) {
      createTarget(rootfs, file, 'file');
      mounts.push('--ro-bind', file, file);
    }
  for (const entry of flags.get('mount') ?? []) {
    if (!/^[^\s]+(:[^\s]+)*$/.test(entry)) fail(`Invalid argument: ${entry}`);
    const [source = '', target, type = 'none', options = ''] = entry.split(':');
    if (target === undefined || !target.startsWith('/')) fail(`Invalid argument: ${entry}`);
    const opts = options.split(',').filter(Boolean);
    if (type !== 'none' || !opts.includes('bind'))
      fail(
        `stand-in: only bind mounts (SRC:DST:none:bind[,ro][,x-create=file|dir]) are reproduced: ${entry}`,
      );
    const unknown = opts.filter(
      (opt) => !['bind', 'rbind', 'ro', 'rw', 'x-create=file', 'x-create=dir'].includes(opt),
    );
    if (unknown.length > 0) fail(`stand-in: mount options ${unknown.join(',')} are not reproduced`);
    if (!existsSync(source)) fail(`Failed to mount: ${source}: No such file or directory`);
    if (opts.includes('x-create=file')) createTarget(rootfs, target, 'file');
    if (opts.includes('x-create=dir')) createTarget(rootfs, target, 'dir');
    mounts.push(opts.includes('ro') ? '--ro-bind' : '--bind', source, target);
  }
  // Enroot takes a lock on this file at start; `list --fancy` looks for it.
  if (!existsSync(join(rootfs, '.lock'))) writeFileSync(join(rootfs, '.lock'), '');
  const remap = flags.has('root');
  const superuser = allowsSuperuser();
  const hooked = runStandardHooks(rootfs, remap);
  mounts.push(...hooked.mounts);
  const { argv, chdir, env } = switchedCommand(rootfs, command, { ...extra, ...hooked.env }, (message) =>
    helperFail('enroot-switchroot', message),
  );
  runToEnd('bwrap', [
    // ENROOT_ALLOW_SUPERUSER lets root start a container without a user namespace: root of
    // the host, with every capability of the host.
    ...(superuser
      ? ['--cap-add', 'ALL']
      : [
          '--unshare-user',
          '--uid',
          remap ? '0' : String(process.getuid?.() ?? 0),
          '--gid',
          remap ? '0' : String(process.getgid?.() ?? 0),
          // Root in its user namespace keeps its capabilities there (enroot-switchroot drops them for others).
          ...(remap ? ['--cap-add', 'ALL'] : []),
        ]),
    flags.has('rw') ? '--bind' : '--ro-bind',
    rootfs,
    '/',
    ...mounts,
    '--chdir',
    chdir,
    '--clearenv',
    ...Object.entries(env).flatMap(([key, value]) => ['--setenv', key, value]),
    '--',
    ...argv,
  ]);
}

function exec(args: string[]): void {
  const { flags, rest } = parseFlags('exec', args, {
    '-e': { kind: 'repeat', long: 'env' },
    '--env': { kind: 'repeat', long: 'env' },
  });
  paths();
  const [pid, ...command] = rest;
  if (pid === undefined || !/^\d+$/.test(pid) || command.length === 0) fail('Invalid argument');
  try {
    process.kill(Number(pid), 0);
  } catch {
    fail(`Process not found: ${pid}`);
  }
  needHelpers(['enroot-nsenter']);
  // enroot-nsenter joins the target's mount namespace first and only then reads the environment
  // that `enroot exec` handed it as `/proc/self/fd/N`: through the /proc mounted there. A target
  // with a /proc of its own pid namespace (the caller not in it) has no `self` for the caller.
  if (!existsSync(`/proc/${pid}/root/proc/self/fd`))
    helperFail('enroot-nsenter', 'failed to load environment: /proc/self/fd/11: No such file or directory');
  const env: Record<string, string> = {};
  for (const entry of readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0')) {
    const at = entry.indexOf('=');
    if (at > 0) env[entry.slice(0, at)] = entry.slice(at + 1);
  }
  for (const pair of flags.get('env') ?? []) {
    if (!/^[A-Za-z_][A-Za-z0-9_]*(=|$)/.test(pair)) fail(`Invalid argument: ${pair}`);
    const at = pair.indexOf('=');
    if (at < 0) env[pair] = process.env[pair] ?? '';
    else env[pair.slice(0, at)] = pair.slice(at + 1);
  }
  // Busybox's nsenter joins without forking (-F): the command is this process's child directly.
  // The user namespace only when it is another one (enroot-nsenter skips its own, as a superuser
  // container has: setns to it fails).
  const sameUser = (() => {
    try {
      return readlinkSync(`/proc/${pid}/ns/user`) === readlinkSync('/proc/self/ns/user');
    } catch {
      return false;
    }
  })();
  const enterUser = sameUser ? [] : ['-U'];
  runToEnd('/bin/busybox', ['nsenter', '-t', pid, ...enterUser, '-m', '-w', '-F', '--', ...command], env);
}

/**
 * Whether root may start a container without a user namespace: ENROOT_ALLOW_SUPERUSER set to
 * anything but Enroot's words for no (its config::fini unsets those), and the caller root. The
 * stand-in reads no enroot.conf: the variable stands for the setting there too.
 */
function allowsSuperuser(): boolean {
  return isOn(process.env.ENROOT_ALLOW_SUPERUSER) && process.getuid?.() === 0;
}

/** Processes whose root is a container's root filesystem: the lowest PID of each mount namespace, by name. */
function containerProcesses(data: string): Map<string, number[]> {
  const mountPoint = execFileSync('stat', ['-c', '%m', data], { encoding: 'utf8' }).trim();
  const relative = `${data.slice(mountPoint === '/' ? 0 : mountPoint.length)}/`;
  const lowest = new Map<string, number>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const namespace = readlinkSync(`/proc/${entry}/ns/mnt`);
      const pid = Number(entry);
      if (!lowest.has(namespace) || lowest.get(namespace)! > pid) lowest.set(namespace, pid);
    } catch {}
  }
  const byName = new Map<string, number[]>();
  for (const pid of [...lowest.values()].sort((left, right) => left - right)) {
    try {
      if (!existsSync(`/proc/${pid}/root/.lock`)) continue;
      const roots = readFileSync(`/proc/${pid}/mountinfo`, 'utf8')
        .split('\n')
        .map((line) => line.split(' '))
        .filter((fields) => fields[4] === '/');
      const root = roots.at(-1)?.[3];
      if (root === undefined) continue;
      // A container of another data path (another user's, another daemon's) is listed too, as Enroot lists it.
      const inHere = root.startsWith(relative) && existsSync(join(data, root.slice(relative.length)));
      const name = inHere ? root.slice(relative.length) : '<unknown>';
      byName.set(name, [...(byName.get(name) ?? []), pid]);
    } catch {}
  }
  return byName;
}

function list(args: string[]): void {
  const { flags, rest } = parseFlags('list', args, {
    '-f': { kind: 'switch', long: 'fancy' },
    '--fancy': { kind: 'switch', long: 'fancy' },
  });
  const { data } = paths();
  if (rest.length > 0) fail('Invalid argument');
  const names = readdirSync(data).sort();
  if (!flags.has('fancy')) {
    process.stdout.write(names.map((name) => `${name}\n`).join(''));
    return;
  }
  const processes = containerProcesses(data);
  if (processes.has('<unknown>')) names.push('<unknown>');
  names.sort();
  const rows: string[][] = [
    ['NAME', 'PID', 'COMM', 'STATE', 'STARTED', 'TIME', 'MNTNS', 'USERNS', 'COMMAND'],
  ];
  for (const name of names) {
    const pids = processes.get(name) ?? [];
    if (pids.length === 0) {
      rows.push([name]);
      continue;
    }
    const shown = spawnSync(
      'ps',
      ['-p', pids.join(','), '--no-headers', '-o', 'pid:1,stat:1,stime:1,etime:1,mntns:1,userns:1,command:1'],
      { encoding: 'utf8' },
    );
    const lines = shown.stdout.split('\n').filter(Boolean);
    if (lines.length === 0) rows.push([name]);
    lines.forEach((line, index) => {
      const [pid = '', ...fields] = line.split(' ');
      const comm = (() => {
        try {
          return readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
        } catch {
          return '?';
        }
      })();
      rows.push([index === 0 ? name : '', pid, comm, ...fields.slice(0, 5), fields.slice(5).join(' ')]);
    });
  }
  // `column -t`: every column but the last padded to its widest cell, two spaces apart.
  const widths = rows[0]!.map((_, column) => Math.max(...rows.map((row) => (row[column] ?? '').length)));
  for (const row of rows)
    process.stdout.write(
      `${row
        .map((cell, column) => (column === row.length - 1 ? cell : cell.padEnd(widths[column]! + 2)))
        .join('')
        .trimEnd()}\n`,
    );
}

const [command, ...args] = process.argv.slice(2);
if (command === 'version') process.stdout.write('4.1.2\n');
else if (command === 'create') create(args);
else if (command === 'start') start(args);
else if (command === 'exec') exec(args);
else if (command === 'export') exportImage(args);
else if (command === 'list') list(args);
else if (command === 'remove') remove(args);
else fail(`stand-in: unknown command ${command ?? '(none)'} (not something the enroot provider should call)`);
