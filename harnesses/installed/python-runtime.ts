/**
 * Agents distributed on PyPI (mini-swe-agent, OpenHands) in sandboxes that have no network and a
 * Python of their own that the agent must leave alone (a task's tests see the image's Python and
 * packages, nothing of the agent's).
 *
 * Each agent gets a runtime folder, made once per host and cached: CPython 3.13 from a Debian
 * trixie root (`debootstrap` from the machine's Debian mirror: the only Python newer than 3.11
 * from the sources this project installs from, and these agents need 3.12 or later), its shared
 * libraries and standard library, and the agent's wheels, pinned with their hashes in a lock file
 * (`harnesses/installed/python/*.lock`), downloaded from PyPI once into a wheelhouse and installed
 * offline. The runtime starts through its own dynamic loader, so it runs on any x86_64 image
 * whatever its C library (an older glibc, musl, busybox), and with `-I`, so no `PYTHON*` variable
 * of the task reaches it; it sets none, so the commands the agent runs see the task's environment
 * as it is. It reaches a sandbox bind-mounted read-only at `/opt/gym-agents/<name>` or copied in as
 * one tarball.
 *
 * Layout of a runtime folder (`<cache>/<name>-<version>-py3.13`):
 *   bin/python3.13, bin/python (launcher), bin/<entry> (launchers), lib/python3.13 (stdlib),
 *   lib/x86_64-linux-gnu (shared libraries, the loader among them),
 *   local/lib/python3.13/dist-packages (the agent), share/gym (our files), gym-runtime.json
 */
import { createHash, randomBytes } from 'node:crypto';
import { chmod, copyFile, mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { GymError } from '../../core/errors.ts';
import { pathExists, runOnHost } from './host-command.ts';

/** An agent installed from PyPI into a runtime of its own on the host, then given to sandboxes. */
export interface PythonHostSource {
  kind: 'python-host';
  /** The agent's name: the runtime folder's and `/opt/gym-agents/<name>`. */
  name: string;
  /** The agent package's version, as pinned in the lock file. */
  version: string;
  /** The lock file in `harnesses/installed/python/`: every package with its hashes. */
  lockFile: string;
  /** Files of ours copied into the runtime (`from` in `harnesses/installed/python/`, `to` in the runtime). */
  files?: Array<{ from: string; to: string }>;
  /**
   * Launchers made in `bin/`: the arguments given to the runtime's Python; an argument with a
   * `/` is a path in the runtime (`share/gym/run.py`), any other is passed as it is (`-m`, `pkg`).
   */
  launchers: Record<string, string[]>;
  /**
   * Install although a package's Requires-Python names a later patch release than the runtime's
   * CPython (3.13.14 against trixie's 3.13.5, as nemo-gym asks): only for a lock whose header says
   * the patch level is all that differs.
   */
  ignoreRequiresPython?: boolean;
}

/** The Python the runtimes are made of. */
export const AGENT_PYTHON = { suite: 'trixie', version: '3.13' } as const;

/** Bumped when the runtime's layout changes, so that runtimes made before are made again. */
const RUNTIME_LAYOUT = 1;

const PYTHON_FILES = fileURLToPath(new URL('./python/', import.meta.url));

/** PyPI platform tags of the wheels a CPython 3.13 on x86_64 glibc Linux (trixie: glibc 2.41) can load. */
const WHEEL_TARGET = [
  ['--python-version', AGENT_PYTHON.version],
  ['--implementation', 'cp'],
  ...['cp313', 'abi3', 'none'].map((abi) => ['--abi', abi]),
  ...[
    'manylinux_2_28_x86_64',
    'manylinux_2_27_x86_64',
    'manylinux_2_24_x86_64',
    'manylinux_2_17_x86_64',
    'manylinux2014_x86_64',
    'manylinux_2_5_x86_64',
    'manylinux1_x86_64',
    'linux_x86_64',
    'any',
  ].map((platform) => ['--platform', platform]),
].flat();

export interface RuntimeManifest {
  name: string;
  version: string;
  python: string;
  digest: string;
}

export function pythonRuntimeDir(cacheDir: string, source: PythonHostSource): string {
  return join(cacheDir, `${source.name}-${source.version}-py${AGENT_PYTHON.version}`);
}

/** The runtime's manifest, or null when it has not been made (or was left half made). */
export async function readRuntimeManifest(dir: string): Promise<RuntimeManifest | null> {
  const text = await readFile(join(dir, 'gym-runtime.json'), 'utf8').catch(() => null);
  if (text === null) return null;
  try {
    return JSON.parse(text) as RuntimeManifest;
  } catch {
    return null;
  }
}

/** What the runtime is made of: its lock, our files and its launchers. A change makes it anew. */
export async function runtimeDigest(source: PythonHostSource): Promise<string> {
  const hash = createHash('sha256');
  hash.update(JSON.stringify({ layout: RUNTIME_LAYOUT, python: AGENT_PYTHON, launchers: source.launchers }));
  if (source.ignoreRequiresPython === true) hash.update('ignore-requires-python');
  hash.update(await readFile(join(PYTHON_FILES, source.lockFile)));
  for (const file of source.files ?? []) {
    hash.update(file.to);
    hash.update(await readFile(join(PYTHON_FILES, file.from)));
  }
  return hash.digest('hex');
}

/** A launcher: the runtime's folder from its own path, then the runtime's Python with `args`. */
export function runtimeLauncher(args: string[]): string {
  const quoted = args.map((arg) => (arg.includes('/') ? `"$d/${arg}"` : `'${arg.replaceAll("'", "'\\''")}'`));
  return `#!/bin/sh\nd=$(dirname "$(dirname "$(readlink -f "$0")")")\nexec "$d/bin/python" ${quoted.join(' ')} "$@"\n`;
}

/**
 * The runtime's Python: its own loader and libraries, `--argv0` so that `sys.executable` is this
 * launcher (a child Python the agent starts runs the same way) and the standard library is found
 * beside it; `-I` keeps the task's `PYTHON*` variables and user site out.
 */
export const PYTHON_LAUNCHER = `#!/bin/sh
d=$(dirname "$(dirname "$(readlink -f "$0")")")
exec "$d/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" --library-path "$d/lib/x86_64-linux-gnu" --argv0 "$d/bin/python" "$d/bin/python3.13" -I "$@"
`;

export type RuntimeLog = (message: string) => void;

export interface InstallRuntimeOptions {
  cacheDir: string;
  /** The Debian mirror debootstrap reads trixie from (the machine's configured one). */
  debianMirror: string;
  /** The Python whose pip downloads the wheels (default `python3`). */
  hostPython?: string;
  log?: RuntimeLog;
}

/** The shared trixie root the runtimes are made from (python3.13, pip and setuptools to install with). */
async function ensureBase(options: InstallRuntimeOptions): Promise<string> {
  const base = join(options.cacheDir, 'python-base', `${AGENT_PYTHON.suite}-python${AGENT_PYTHON.version}`);
  if (await pathExists(join(base, 'usr', 'bin', `python${AGENT_PYTHON.version}`))) return base;
  const staging = `${base}.staging-${process.pid}-${randomBytes(4).toString('hex')}`;
  await mkdir(dirname(base), { recursive: true });
  options.log?.(`debootstrap ${AGENT_PYTHON.suite} with python${AGENT_PYTHON.version} (about a minute)`);
  try {
    await runOnHost(
      'debootstrap',
      [
        '--variant=minbase',
        `--include=python${AGENT_PYTHON.version},python3-pip,python3-setuptools`,
        AGENT_PYTHON.suite,
        staging,
        options.debianMirror,
      ],
      `debootstrap ${AGENT_PYTHON.suite}`,
    );
    await runOnHost(
      'sh',
      ['-c', `rm -rf "${staging}"/var/cache/apt/archives/*.deb "${staging}"/var/lib/apt/lists/*`],
      'cleaning',
    );
    await rm(base, { recursive: true, force: true });
    await rename(staging, base);
  } finally {
    await rm(staging, { recursive: true, force: true });
  }
  return base;
}

/** Runtimes being made by this process: concurrent callers wait for the one build. */
const builds = new Map<string, Promise<{ dir: string; built: boolean }>>();

/**
 * Makes the agent's runtime on this host when it is missing or made of other pins: the trixie
 * root (once), the wheels (downloaded with their hashes checked, kept in `<cache>/wheelhouse`),
 * installed offline in a copy of the root, then only what runs kept. Needs root (chroot).
 */
export function installPythonAgentRuntime(
  source: PythonHostSource,
  options: InstallRuntimeOptions,
): Promise<{ dir: string; built: boolean }> {
  const key = JSON.stringify([source.name, source.version, options.cacheDir]);
  let build = builds.get(key);
  if (build === undefined) {
    build = buildRuntime(source, options).finally(() => builds.delete(key));
    builds.set(key, build);
  }
  return build;
}

async function buildRuntime(
  source: PythonHostSource,
  options: InstallRuntimeOptions,
): Promise<{ dir: string; built: boolean }> {
  const dir = pythonRuntimeDir(options.cacheDir, source);
  const digest = await runtimeDigest(source);
  if ((await readRuntimeManifest(dir))?.digest === digest) return { dir, built: false };
  if (process.getuid?.() !== 0)
    throw new GymError(
      'CAPABILITY_UNSUPPORTED',
      `making the ${source.name} runtime needs root (it installs into a chroot); run \`gym agent install ${source.name}\` as root`,
    );
  const base = await ensureBase(options);
  const lock = join(PYTHON_FILES, source.lockFile);
  const wheelhouse = join(options.cacheDir, 'wheelhouse');
  await mkdir(wheelhouse, { recursive: true });
  options.log?.(`downloading ${source.name} ${source.version}'s wheels (hashes checked)`);
  await runOnHost(
    options.hostPython ?? 'python3',
    [
      '-m',
      'pip',
      'download',
      '--quiet',
      '--no-deps',
      '--require-hashes',
      '--disable-pip-version-check',
      ...(source.ignoreRequiresPython === true ? ['--ignore-requires-python'] : []),
      ...WHEEL_TARGET,
      '-r',
      lock,
      '-d',
      wheelhouse,
    ],
    `downloading ${source.name}'s wheels`,
  );

  const staging = `${dir}.staging-${process.pid}-${randomBytes(4).toString('hex')}`;
  const root = join(staging, 'root');
  const runtime = join(staging, 'runtime');
  try {
    await mkdir(staging, { recursive: true });
    options.log?.(`installing ${source.name} ${source.version} offline into python${AGENT_PYTHON.version}`);
    await runOnHost('cp', ['-a', base, root], 'copying the trixie root');
    // Hard links: the wheelhouse and the cache are one filesystem; a copy where they are not.
    await runOnHost(
      'sh',
      ['-c', 'cp -al "$0" "$1" 2>/dev/null || cp -a "$0" "$1"', wheelhouse, join(root, 'tmp', 'wheelhouse')],
      'linking the wheelhouse',
    );
    await copyFile(lock, join(root, 'tmp', 'gym-lock.txt'));
    await runOnHost(
      'chroot',
      [
        root,
        'env',
        '-i',
        'PATH=/usr/local/bin:/usr/bin:/bin',
        'HOME=/root',
        'LANG=C.UTF-8',
        `python${AGENT_PYTHON.version}`,
        '-m',
        'pip',
        'install',
        '--quiet',
        '--no-index',
        '--find-links',
        '/tmp/wheelhouse',
        '--require-hashes',
        '--no-deps',
        '--ignore-installed',
        '--break-system-packages',
        '--root-user-action=ignore',
        '--no-cache-dir',
        '--no-build-isolation',
        '--no-warn-script-location',
        ...(source.ignoreRequiresPython === true ? ['--ignore-requires-python'] : []),
        '-r',
        '/tmp/gym-lock.txt',
      ],
      `installing ${source.name}`,
    );
    const version = (
      await runOnHost(
        'chroot',
        [root, `python${AGENT_PYTHON.version}`, '-c', 'import platform; print(platform.python_version())'],
        'reading the Python version',
      )
    ).trim();

    // Only what runs: the interpreter, its standard library and libraries, the agent's packages.
    await mkdir(join(runtime, 'bin'), { recursive: true });
    await mkdir(join(runtime, 'lib'), { recursive: true });
    await mkdir(join(runtime, 'local', 'lib', `python${AGENT_PYTHON.version}`), { recursive: true });
    await copyFile(
      join(root, 'usr', 'bin', `python${AGENT_PYTHON.version}`),
      join(runtime, 'bin', `python${AGENT_PYTHON.version}`),
    );
    await chmod(join(runtime, 'bin', `python${AGENT_PYTHON.version}`), 0o755);
    await rename(
      join(root, 'usr', 'lib', `python${AGENT_PYTHON.version}`),
      join(runtime, 'lib', `python${AGENT_PYTHON.version}`),
    );
    await rename(join(root, 'usr', 'lib', 'x86_64-linux-gnu'), join(runtime, 'lib', 'x86_64-linux-gnu'));
    await rename(
      join(root, 'usr', 'local', 'lib', `python${AGENT_PYTHON.version}`, 'dist-packages'),
      join(runtime, 'local', 'lib', `python${AGENT_PYTHON.version}`, 'dist-packages'),
    );
    for (const file of source.files ?? []) {
      await mkdir(dirname(join(runtime, file.to)), { recursive: true });
      await copyFile(join(PYTHON_FILES, file.from), join(runtime, file.to));
    }
    await writeFile(join(runtime, 'bin', 'python'), PYTHON_LAUNCHER, { mode: 0o755 });
    for (const [name, args] of Object.entries(source.launchers))
      await writeFile(join(runtime, 'bin', name), runtimeLauncher(args), { mode: 0o755 });
    const manifest: RuntimeManifest = { name: source.name, version: source.version, python: version, digest };
    // The manifest last: a folder without it is not a runtime.
    await writeFile(join(runtime, 'gym-runtime.json'), `${JSON.stringify(manifest, null, 2)}\n`);
    await rm(dir, { recursive: true, force: true });
    await rm(`${dir}.tgz`, { force: true });
    await rename(runtime, dir);
  } finally {
    await rm(staging, { recursive: true, force: true });
  }
  return { dir, built: true };
}

/** Bundles being packed by this process. */
const packs = new Map<string, Promise<string>>();

/**
 * The runtime packed as one gzip tarball, for sandboxes that cannot bind it (made once, beside the
 * folder). `bin/` is packed last, so a sandbox whose unpack was cut off has no launcher and is
 * not taken for one that has the agent.
 */
export function ensureRuntimeBundle(dir: string): Promise<string> {
  let pack = packs.get(dir);
  if (pack === undefined) {
    pack = packRuntime(dir).finally(() => packs.delete(dir));
    packs.set(dir, pack);
  }
  return pack;
}

async function packRuntime(dir: string): Promise<string> {
  const bundle = `${dir}.tgz`;
  if (await pathExists(bundle)) return bundle;
  const staging = `${bundle}.staging-${process.pid}-${randomBytes(4).toString('hex')}`;
  try {
    await runOnHost(
      'sh',
      [
        '-c',
        'cd "$0" && tar -cf - gym-runtime.json lib local $(ls -d share 2>/dev/null) bin | gzip -1 > "$1"',
        dir,
        staging,
      ],
      'packing the runtime',
    );
    await rename(staging, bundle);
  } finally {
    await rm(staging, { force: true });
  }
  return bundle;
}
