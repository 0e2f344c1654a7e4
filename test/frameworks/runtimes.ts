/**
 * The Python frameworks our users run (Harbor, SWE-ReX, NeMo Gym, ...), each made on this host as
 * a self-contained CPython 3.13 runtime from its hash-pinned lock file, exactly as the agents from
 * PyPI are (`harnesses/installed/python-runtime.ts`): the integration tests in `python/` run the
 * real framework from it against a real daemon. Set-up makes them (`scripts/framework-runtimes.ts`);
 * a test finds one with `frameworkRuntimeDir`.
 */
import { homedir } from 'node:os';
import { join } from 'node:path';
import { type PythonHostSource, pythonRuntimeDir } from '../../harnesses/installed/python-runtime.ts';

/** Each framework's runtime: `lockFile` in `harnesses/installed/python/` (`framework-<name>.lock`). */
export const FRAMEWORK_RUNTIMES: readonly PythonHostSource[] = [
  {
    // NeMo Gym: its sandbox registry and facade run our provider (python/tests/test_nemo_*.py).
    // 0.5 and later declare Requires-Python >=3.13.14; the runtime's CPython is trixie's 3.13.5,
    // the patch level all that differs (the lock's header says so).
    kind: 'python-host',
    name: 'nemo-gym',
    version: '0.7.0',
    lockFile: 'framework-nemo-gym.lock',
    ignoreRequiresPython: true,
    launchers: {},
  },
  // SWE-ReX's runtime models and exceptions, driven by test/swe-rex-deployment.int.test.ts.
  {
    kind: 'python-host',
    name: 'swe-rex',
    version: '1.4.0',
    lockFile: 'framework-swe-rex.lock',
    launchers: {},
  },
  // Harbor's own `harbor` command (`harbor run`), for test/harbor-environment.int.test.ts.
  {
    kind: 'python-host',
    name: 'harbor',
    version: '0.26.0',
    lockFile: 'framework-harbor.lock',
    launchers: { harbor: ['-m', 'harbor.cli.main'] },
  },
];

/** Where set-up keeps the frameworks' runtimes. */
export const FRAMEWORK_CACHE = join(homedir(), '.cache', 'gym', 'frameworks');

/** The runtime folder of the named framework (its `bin/python` runs isolated, `-I`). */
export function frameworkRuntimeDir(name: string, cacheDir = FRAMEWORK_CACHE): string {
  const source = FRAMEWORK_RUNTIMES.find((item) => item.name === name);
  if (source === undefined) throw new Error(`no framework runtime named "${name}"`);
  return pythonRuntimeDir(cacheDir, source);
}
