/**
 * What the enroot stand-in's `start` does to a root filesystem and a command before it runs it, as
 * Enroot 4.1.2 does with its stock configuration (read from its source: `runtime::_start`, the
 * hooks in conf/hooks/, enroot-switchroot's `sys_login` and `sys_init`):
 *
 * - The standard hooks run on every start, before the command and whatever `--rw` says, and their
 *   changes stay in the root filesystem (so `export` keeps them):
 *   10-shadow puts root, nobody and the caller's own passwd and group entries first in
 *   /etc/passwd and /etc/group (`_apt` lines dropped) and makes the caller's home; 10-aptfix writes
 *   /etc/apt/apt.conf.d/enroot in a Debian root started with `--root`. Its pwck/grpck pass, which
 *   dedupes a root that has shadow files, is not reproduced: the lines stay doubled, as they do in a
 *   busybox root. With ENROOT_MOUNT_HOME on, 10-home binds the caller's home folder read-write
 *   into the container (at /root with `--root`).
 * - The command runs through the container's shell (root's from /etc/passwd, after the hooks;
 *   /bin/sh when it is not executable there), as `sh -c 'exec "$@"' sh CMD...` (or `sh /etc/rc
 *   CMD...` when the root has /etc/rc), with the environment of the root's /etc/environment, the
 *   host's TERM and the `--env` ones, nothing else. With ENROOT_LOGIN_SHELL (on unless set to one
 *   of Enroot's words for no) it is a login shell: it reads /etc/profile first, and starts in
 *   root's home, failing as enroot-switchroot does when that folder is missing; HOME, SHELL, USER,
 *   LOGNAME, TERM and PATH are set when the environment lacks them.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { userInfo } from 'node:os';
import { join } from 'node:path';

/** Whether an ENROOT_* setting is on: set, and not one of the words Enroot's config::fini unsets. */
export function isOn(value: string | undefined): boolean {
  return value !== undefined && value !== '' && !/^(no?|N[oO]?|[fF](alse)?|FALSE)$/.test(value);
}

function readLines(path: string): string[] {
  return existsSync(path) ? readFileSync(path, 'utf8').split('\n').filter(Boolean) : [];
}

/** The host's entry for a uid or gid in /etc/passwd or /etc/group (what `getent` gives). */
function hostEntry(file: '/etc/passwd' | '/etc/group', id: number): string[] | undefined {
  return readLines(file)
    .map((line) => line.split(':'))
    .find((fields) => fields[2] === String(id));
}

function isExecutableIn(rootfs: string, path: string): boolean {
  return path.startsWith('/') && spawnSync('test', ['-x', join(rootfs, path)]).status === 0;
}

/** What a hook adds to the start: bubblewrap's mount arguments, and environment that wins over `--env`. */
export interface HookAdditions {
  mounts: string[];
  env: Record<string, string>;
}

/**
 * Enroot's 10-shadow, 10-aptfix and 10-home hooks on `rootfs`, for the calling user. 10-home acts
 * only with ENROOT_MOUNT_HOME on (the environment stands for enroot.conf here): the caller's home
 * folder bound read-write at /root (with `--root`) or at its own path, and HOME set to it.
 */
export function runStandardHooks(rootfs: string, remapRoot: boolean): HookAdditions {
  const uid = process.getuid?.() ?? 0;
  const gid = process.getgid?.() ?? 0;
  const nobody = readFileSync('/proc/sys/kernel/overflowuid', 'utf8').trim();
  const nogroup = readFileSync('/proc/sys/kernel/overflowgid', 'utf8').trim();
  const [user = userInfo().username, , , , gecos = '', home = '/', givenShell = '/bin/sh'] =
    hostEntry('/etc/passwd', uid) ?? [];
  const [group = user] = hostEntry('/etc/group', gid) ?? [];
  const shell = isExecutableIn(rootfs, givenShell) ? givenShell : '/bin/sh';
  const etc = join(rootfs, 'etc');
  mkdirSync(etc, { recursive: true });
  const keep = (file: string) => readLines(join(etc, file)).filter((line) => !line.startsWith('_apt:'));
  const passwd = [
    `root:x:0:0:root:/root:${shell}`,
    `nobody:x:${nobody}:${nogroup}:nobody:/:/sbin/nologin`,
    `${user}:x:${uid}:${gid}:${gecos}:${home}:${shell}`,
  ];
  writeFileSync(join(etc, 'passwd'), `${[...passwd, ...keep('passwd')].join('\n')}\n`);
  const groups = ['root:x:0:', `nogroup:x:${nogroup}:`, `${group}:x:${gid}:`];
  writeFileSync(join(etc, 'group'), `${[...groups, ...keep('group')].join('\n')}\n`);
  if (!existsSync(join(rootfs, home))) mkdirSync(join(rootfs, home), { recursive: true, mode: 0o700 });
  if (remapRoot && existsSync(join(etc, 'debian_version'))) {
    mkdirSync(join(etc, 'apt', 'apt.conf.d'), { recursive: true });
    writeFileSync(join(etc, 'apt', 'apt.conf.d', 'enroot'), 'APT::Sandbox::User "root";\n');
  }
  if (!isOn(process.env.ENROOT_MOUNT_HOME)) return { mounts: [], env: {} };
  const callerHome = process.env.HOME || home;
  const target = remapRoot ? '/root' : callerHome;
  mkdirSync(join(rootfs, target), { recursive: true });
  return { mounts: ['--bind', callerHome, target], env: { HOME: target } };
}

/** `/etc/environment` of the root, each `${VAR}` filled in from the caller's environment as Enroot's envsubst does. */
function rootEnvironment(rootfs: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const line of readLines(join(rootfs, 'etc', 'environment'))) {
    const match = /^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$/.exec(line);
    if (match === null) continue;
    const value = match[2]!.replace(/^(["'])(.*)\1$/, '$2');
    env[match[1]!] = value.replace(
      /\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?/g,
      (_, name: string) => process.env[name] ?? '',
    );
  }
  return env;
}

/** What enroot-switchroot runs: the program and its argv, the folder it starts in, its environment. */
export interface SwitchedCommand {
  argv: string[];
  chdir: string;
  env: Record<string, string>;
}

/**
 * The command as enroot-switchroot runs it in `rootfs` (the hooks already run), with `extra` the
 * `--env` ones; `fail` ends the call as enroot-switchroot fails.
 */
export function switchedCommand(
  rootfs: string,
  command: string[],
  extra: Record<string, string>,
  fail: (message: string) => never,
): SwitchedCommand {
  const env: Record<string, string> = {
    ...rootEnvironment(rootfs),
    TERM: process.env.TERM ?? '',
    ...extra,
  };
  const [, , , , , home = '/', rootShell = ''] =
    readLines(join(rootfs, 'etc', 'passwd'))
      .map((line) => line.split(':'))
      .find((fields) => fields[2] === '0') ?? [];
  const login = isOn(process.env.ENROOT_LOGIN_SHELL ?? 'true');
  let chdir = '/';
  if (login) {
    const defaults = { TERM: 'dumb', HOME: home, SHELL: rootShell, USER: 'root', LOGNAME: 'root' };
    // enroot-switchroot is built with musl: its standard PATH for root.
    for (const [key, value] of Object.entries({ ...defaults, PATH: '/bin:/usr/bin:/sbin:/usr/sbin' }))
      if (env[key] === undefined && value !== '') env[key] = value;
    if (!existsSync(join(rootfs, env.HOME!))) fail(`failed to change directory: ${env.HOME}`);
    chdir = env.HOME!;
  }
  const shellPath = env.SHELL !== undefined && isExecutableIn(rootfs, env.SHELL) ? env.SHELL : '/bin/sh';
  const name = shellPath.replace(/^.*\//, '');
  const shell = login ? [shellPath, '-l'] : [shellPath];
  if (existsSync(join(rootfs, 'etc', 'rc'))) return { argv: [...shell, '/etc/rc', ...command], chdir, env };
  if (command.length === 0) return { argv: shell, chdir, env };
  const [first, ...rest] = command as [string, ...string[]];
  if (first.includes(' ')) return { argv: [...shell, '-c', first, name, ...rest], chdir, env };
  return { argv: [...shell, '-c', 'exec "$@"', name, ...command], chdir, env };
}
