/**
 * The Python package (python/) installs the ways a user installs it, each into a clean virtual
 * environment and with no package index at all (`--no-index`, uv's `--offline`): its build
 * backend is the package's own, standard library only, so nothing is fetched to build it.
 *
 * On the machine's python3 (3.11) and, where the machine has one, pyenv's 3.13: `pip install` with
 * and without build isolation, `pip wheel` then the wheel, an editable install, `uv pip install`,
 * and `uv build`'s sdist (its wheel made from the sdist) installed by pip. On the agents' Python
 * 3.13 runtime (set-up makes it; it has neither pip nor a venv of its own): the wheel built by the
 * backend under that interpreter alone, and `uv pip install --target` with it. Each installed copy
 * must import without any framework installed, from where it was installed, and carry its version,
 * its NeMo Gym entry point (loadable) and its extras. uv is the one set-up installs (`python3 -m uv`).
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MINI_SWE_AGENT_RECIPE } from '../harnesses/installed/mini-swe-agent.ts';
import {
  type PythonHostSource,
  pythonRuntimeDir,
  readRuntimeManifest,
} from '../harnesses/installed/python-runtime.ts';

const PACKAGE = new URL('../python', import.meta.url).pathname;
const PYTHON_311 = process.env.GYM_PYTHON_INSTALL ?? 'python3';
/** pyenv's 3.13 where the machine has it; the agents' runtime below is the 3.13 every machine has. */
const PYENV_313 = '/root/.pyenv/versions/3.13.0/bin/python3';
const RUNTIME = pythonRuntimeDir(
  join(homedir(), '.cache', 'gym', 'agents'),
  MINI_SWE_AGENT_RECIPE.source as PythonHostSource,
);
const EXTRAS = ['harbor', 'mini-swe-agent', 'nemo-gym', 'swe-rex'];
const ENTRY_POINT = 'gym_sandboxd.nemo_gym_provider:GymSandboxdProvider';
const FRAMEWORKS = ['harbor', 'minisweagent', 'swerex', 'nemo_gym'];
/**
 * What an installed copy says of itself. argv[1], when given, goes first on sys.path: the agents'
 * runtime runs isolated (-I) and reads no PYTHONPATH.
 */
const INSPECT = `
import sys, json
if len(sys.argv) > 1: sys.path.insert(0, sys.argv[1])
import importlib.metadata as metadata, gym_sandboxd
[entry] = [e for e in metadata.entry_points(group="nemo_gym.sandbox_providers") if e.name == "gym_sandboxd"]
provider = entry.load()
meta = metadata.metadata("gym-sandboxd")
print(json.dumps({
  "file": gym_sandboxd.__file__, "version": meta["Version"], "entryPoint": entry.value,
  "provider": provider.__name__, "extras": sorted(meta.get_all("Provides-Extra") or []),
  "requires": meta.get_all("Requires-Dist") or [], "python": "%d.%d" % sys.version_info[:2],
  "frameworks": [name for name in ${JSON.stringify(FRAMEWORKS)} if name in sys.modules],
}))
`;

interface Installed {
  file: string;
  version: string;
  entryPoint: string;
  provider: string;
  extras: string[];
  requires: string[];
  python: string;
  frameworks: string[];
}

/** No index and no find-links from the machine's configuration: what builds, builds from here alone. */
function offlineEnvironment(uvCache: string): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    PIP_NO_INDEX: '1',
    PIP_NO_CACHE_DIR: '1',
    UV_OFFLINE: '1',
  };
  delete env.PIP_FIND_LINKS;
  env.UV_CACHE_DIR = uvCache;
  env.PYTHONDONTWRITEBYTECODE = '1';
  return env;
}

describe('the Python package installs the usual ways, offline, into clean environments', () => {
  let scratch: string;
  let env: NodeJS.ProcessEnv;
  let version: string;
  let count = 0;

  const run = (command: string, args: string[], cwd = scratch): Promise<string> =>
    new Promise((resolve, reject) => {
      execFile(command, args, { cwd, env, maxBuffer: 16 * 1024 * 1024 }, (error, stdout, stderr) => {
        if (error) reject(new Error(`${command} ${args.join(' ')} failed:\n${stdout}${stderr}`));
        else resolve(stdout);
      });
    });
  const fresh = (name: string) => join(scratch, `${name}-${++count}`);
  const venv = async (python: string) => {
    const directory = fresh('venv');
    await run(python, ['-m', 'venv', directory]);
    return directory;
  };
  const uv = (args: string[]) => run(PYTHON_311, ['-m', 'uv', ...args]);
  const inspect = async (python: string, path?: string) =>
    JSON.parse(await run(python, ['-c', INSPECT, ...(path === undefined ? [] : [path])])) as Installed;
  const expectInstalled = (installed: Installed, from: string, python: string) => {
    expect(installed.file.startsWith(from), `imported from ${installed.file}, not ${from}`).toBe(true);
    expect(installed).toMatchObject({
      version,
      entryPoint: ENTRY_POINT,
      provider: 'GymSandboxdProvider',
      python,
    });
    expect(installed.extras).toEqual(EXTRAS);
    for (const extra of EXTRAS)
      expect(installed.requires.some((requirement) => requirement.endsWith(`extra == "${extra}"`))).toBe(
        true,
      );
    // No requirement outside the extras: the package itself is the standard library only.
    expect(installed.requires.every((requirement) => requirement.includes('extra =='))).toBe(true);
    expect(installed.frameworks).toEqual([]);
  };
  const sitePackages = (venvDirectory: string, python: string) =>
    join(venvDirectory, 'lib', `python${python}`, 'site-packages', 'gym_sandboxd');

  beforeAll(async () => {
    scratch = await mkdtemp(join(tmpdir(), 'gym-python-install-'));
    env = offlineEnvironment(join(scratch, 'uv-cache'));
    const pyproject = await readFile(join(PACKAGE, 'pyproject.toml'), 'utf8');
    version = /^version = "([^"]+)"/m.exec(pyproject)?.[1] ?? '';
    expect(version).not.toBe('');
  });

  afterAll(async () => {
    if (scratch !== undefined) await rm(scratch, { recursive: true, force: true });
  });

  const interpreters = [
    { label: "the machine's python3", python: PYTHON_311, minor: '3.11' },
    ...(existsSync(PYENV_313) ? [{ label: "pyenv's 3.13", python: PYENV_313, minor: '3.13' }] : []),
  ];

  describe.each(interpreters)('on $label', ({ python, minor }) => {
    it('pip install, with and without build isolation, into fresh venvs', { timeout: 180_000 }, async () => {
      for (const isolation of [[], ['--no-build-isolation']]) {
        const directory = await venv(python);
        const venvPython = join(directory, 'bin', 'python');
        await run(venvPython, ['-m', 'pip', 'install', '--no-index', ...isolation, PACKAGE]);
        expectInstalled(await inspect(venvPython), sitePackages(directory, minor), minor);
      }
      // The source tree is left as it was: no build/, dist/ or egg-info beside the package.
      const leftovers = (await readdir(PACKAGE)).filter((name) => /^(build|dist)$|\.egg-info$/.test(name));
      expect(leftovers).toEqual([]);
    });

    it('pip wheel, then the wheel; and an editable install', { timeout: 180_000 }, async () => {
      const wheels = fresh('wheels');
      await run(python, ['-m', 'pip', 'wheel', '--no-index', '--no-deps', PACKAGE, '-w', wheels]);
      const wheel = `gym_sandboxd-${version}-py3-none-any.whl`;
      expect(await readdir(wheels)).toEqual([wheel]);
      const directory = await venv(python);
      const venvPython = join(directory, 'bin', 'python');
      await run(venvPython, ['-m', 'pip', 'install', '--no-index', join(wheels, wheel)]);
      expectInstalled(await inspect(venvPython), sitePackages(directory, minor), minor);

      const editable = await venv(python);
      const editablePython = join(editable, 'bin', 'python');
      await run(editablePython, ['-m', 'pip', 'install', '--no-index', '--editable', PACKAGE]);
      expectInstalled(await inspect(editablePython), join(PACKAGE, 'gym_sandboxd'), minor);
    });

    it('uv pip install into a uv venv, and uv build (the wheel made from the sdist)', {
      timeout: 180_000,
    }, async () => {
      const directory = fresh('uv-venv');
      await uv(['venv', '--quiet', '--python', python, directory]);
      const venvPython = join(directory, 'bin', 'python');
      await uv(['pip', 'install', '--python', venvPython, PACKAGE]);
      expectInstalled(await inspect(venvPython), sitePackages(directory, minor), minor);

      const built = fresh('uv-build');
      await uv(['build', '--quiet', '--python', python, PACKAGE, '--out-dir', built]);
      // uv also leaves a .gitignore there.
      expect((await readdir(built)).filter((name) => name.startsWith('gym_sandboxd-')).sort()).toEqual([
        `gym_sandboxd-${version}-py3-none-any.whl`,
        `gym_sandboxd-${version}.tar.gz`,
      ]);
      const fromSdist = await venv(python);
      const sdistPython = join(fromSdist, 'bin', 'python');
      await run(sdistPython, [
        '-m',
        'pip',
        'install',
        '--no-index',
        join(built, `gym_sandboxd-${version}.tar.gz`),
      ]);
      expectInstalled(await inspect(sdistPython), sitePackages(fromSdist, minor), minor);
    });
  });

  describe("on the agents' Python 3.13 runtime (no pip, no venv of its own)", () => {
    const runtimePython = join(RUNTIME, 'bin', 'python');

    beforeAll(async () => {
      // set-up made it (`gym agent install`); a missing runtime is a failure, not a skip.
      expect(
        await readRuntimeManifest(RUNTIME),
        `no runtime at ${RUNTIME}: run gym agent install`,
      ).not.toBeNull();
    });

    it('builds the wheel with the interpreter alone, and uv installs it with --target', {
      timeout: 180_000,
    }, async () => {
      const wheels = fresh('runtime-wheels');
      await mkdir(wheels);
      const hook = `import sys; sys.path.insert(0, "build_backend"); import gym_sandboxd_build as backend; print(backend.build_wheel(${JSON.stringify(wheels)}))`;
      const wheel = (await run(runtimePython, ['-c', hook], PACKAGE)).trim();
      expect(wheel).toBe(`gym_sandboxd-${version}-py3-none-any.whl`);
      const fromWheel = fresh('runtime-target');
      await uv(['pip', 'install', '--python', runtimePython, '--target', fromWheel, join(wheels, wheel)]);
      expectInstalled(await inspect(runtimePython, fromWheel), join(fromWheel, 'gym_sandboxd'), '3.13');

      // uv builds from the source folder with that interpreter too.
      const fromSource = fresh('runtime-target');
      await uv(['pip', 'install', '--python', runtimePython, '--target', fromSource, PACKAGE]);
      expectInstalled(await inspect(runtimePython, fromSource), join(fromSource, 'gym_sandboxd'), '3.13');
    });
  });
});
