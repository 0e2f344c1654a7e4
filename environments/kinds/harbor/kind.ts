/**
 * The `harbor` kind: Harbor task directories (task-directory.ts reads them into rows). The agent
 * works in a sandbox of the task's image from the image's working directory; after it finishes,
 * its processes are stopped, `tests/` is copied to /tests and test.sh run as Harbor runs it
 * (environments/verifiers/script.ts); the oracle runs `solution/solve.sh` from /solution.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { z } from 'zod';
import { GymError } from '../../../core/errors.ts';
import { DEFAULT_RESOURCES } from '../../../daemon/config.ts';
import type { LoadedEnvironment } from '../../environment.ts';
import { verifyScript } from '../../verifiers/script.ts';
import { nonEmpty, sandboxPath } from '../fields.ts';
import { type EnvironmentKind, parseRow, type TaskRow } from '../kind.ts';
import { buildHarborImages } from './images.ts';
import { MAX_BUILD_TIMEOUT_SEC, resolveTaskEnv } from './task-directory.ts';

const Env = z.record(z.string(), z.string());
const Seconds = z
  .number()
  .positive()
  .max(7 * 24 * 3600);

export const HarborRowSchema = z.looseObject({
  id: nonEmpty,
  instruction: nonEmpty,
  task_dir: sandboxPath,
  image: nonEmpty,
  workdir: sandboxPath,
  verifier_timeout_sec: Seconds,
  agent_timeout_sec: Seconds.optional(),
  environment_env: Env.default({}),
  verifier_env: Env.default({}),
  solution_env: Env.default({}),
  verifier_user: nonEmpty.optional(),
  cpus: z.number().positive().optional(),
  memory_mb: z.number().int().positive().optional(),
  build_timeout_sec: z.number().positive().max(MAX_BUILD_TIMEOUT_SEC).optional(),
});

/**
 * The host variables a task's `${VAR}` may read: the environment's `options.taskEnv` (which
 * `gym eval run --task-env VAR` adds to). None by default: a dataset never reads the operator's
 * environment (API keys, cloud credentials) on its own.
 */
export function allowedTaskEnv(environment: LoadedEnvironment): ReadonlySet<string> {
  const names = (environment.options as { taskEnv?: unknown } | undefined)?.taskEnv;
  if (names === undefined) return new Set();
  if (!Array.isArray(names) || !names.every((name) => typeof name === 'string'))
    throw new GymError(
      'VALIDATION_FAILED',
      `environment ${environment.name}: options.taskEnv must be a list of variable names`,
    );
  return new Set(names);
}

const taskEnv = (row: TaskRow, environment: LoadedEnvironment, key: EnvKey, what: string) =>
  resolveTaskEnv(envOf(row, key), process.env, `task.toml ${what} env`, allowedTaskEnv(environment));

/**
 * The most a task's sandbox may have: the environment's sandbox resources, else the daemon's
 * defaults. A task may ask for less (task.toml cpus, memory_mb), never more.
 */
export function resourceCeiling(environment: LoadedEnvironment): { cpus: number; memoryMiB: number } {
  const own = (environment.sandbox as { resources?: { cpus?: number; memoryMiB?: number } }).resources ?? {};
  return {
    cpus: own.cpus ?? DEFAULT_RESOURCES.cpus,
    memoryMiB: own.memoryMiB ?? DEFAULT_RESOURCES.memoryMiB,
  };
}

/** A task's cpus and memory_mb held to the ceiling, with what was lowered (for a warning). */
export function taskResources(
  row: TaskRow,
  environment: LoadedEnvironment,
): { cpus?: number; memoryMiB?: number; lowered: string[] } {
  const ceiling = resourceCeiling(environment);
  const lowered: string[] = [];
  const hold = (asked: unknown, most: number, field: string) => {
    if (typeof asked !== 'number') return undefined;
    if (asked <= most) return asked;
    lowered.push(`${field} ${asked} is more than the environment's sandbox allows: ${most} used`);
    return most;
  };
  const cpus = hold(row.cpus, ceiling.cpus, 'cpus');
  const memoryMiB = hold(row.memory_mb, ceiling.memoryMiB, 'memory_mb');
  return {
    ...(cpus === undefined ? {} : { cpus }),
    ...(memoryMiB === undefined ? {} : { memoryMiB }),
    lowered,
  };
}

/** The solution folder as files under /solution, solve.sh made executable (Harbor chmods it). */
function solutionFiles(taskDir: string): Array<{ path: string; content: Buffer; mode: number }> {
  const directory = join(taskDir, 'solution');
  return readdirSync(directory, { withFileTypes: true, recursive: true })
    .filter((entry) => entry.isFile())
    .map((entry) => {
      const path = join(entry.parentPath, entry.name);
      const target = `/solution/${relative(directory, path)}`;
      const mode = (statSync(path).mode & 0o777) | (target === '/solution/solve.sh' ? 0o111 : 0);
      return { path: target, content: readFileSync(path), mode };
    });
}

const hasSolution = (taskDir: string) => {
  try {
    return statSync(join(taskDir, 'solution', 'solve.sh')).isFile();
  } catch {
    return false;
  }
};

export const kind: EnvironmentKind = {
  name: 'harbor',
  rowSchema: HarborRowSchema,
  image: (row) => String(row.image),
  // Fails before any sandbox starts: a `${VAR}` the operator did not allow, in any of the three.
  checkRow: (row, environment) => {
    taskEnv(row, environment, 'environment_env', '[environment]');
    taskEnv(row, environment, 'verifier_env', '[verifier]');
    taskEnv(row, environment, 'solution_env', '[solution]');
  },
  // task.toml's env over the environment's; its cpus and memory_mb only below the environment's
  // (whose pids limit stays).
  sandbox: (row, environment) => {
    const { lowered: _lowered, ...asked } = taskResources(row, environment);
    return {
      workdir: String(row.workdir),
      env: {
        ...((environment.sandbox as { env?: object }).env ?? {}),
        ...taskEnv(row, environment, 'environment_env', '[environment]'),
      },
      resources: { ...((environment.sandbox as { resources?: object }).resources ?? {}), ...asked },
    };
  },
  limits: (row) =>
    typeof row.agent_timeout_sec === 'number' ? { wallTimeMs: row.agent_timeout_sec * 1000 } : {},
  task: (row, environment, options) => {
    const taskDir = String(row.task_dir);
    return {
      id: String(row.id),
      instruction: String(row.instruction),
      workdir: String(row.workdir),
      // tests/test.sh judges the final state; the workdir need not be a git repository.
      graded: 'state',
      ...(options.usesGoldPatch && hasSolution(taskDir)
        ? {
            solution: '/solution/solve.sh',
            solutionFiles: solutionFiles(taskDir),
            solutionEnv: {
              DEBIAN_FRONTEND: 'noninteractive',
              ...taskEnv(row, environment, 'solution_env', '[solution]'),
            },
          }
        : {}),
    };
  },
  verify: ({ row, sandbox, environment }) =>
    verifyScript(sandbox, join(String(row.task_dir), 'tests'), Number(row.verifier_timeout_sec) * 1000, {
      workdir: String(row.workdir),
      env: taskEnv(row, environment, 'verifier_env', '[verifier]'),
      ...(typeof row.verifier_user === 'string' ? { user: row.verifier_user } : {}),
    }),
  // The final state is gone with the sandbox: a Harbor rollout keeps its reward.
  async prepareImages({ client, environment, rows, logger, onStart, onImage, onNotice }) {
    // Only rows the kind accepts are built (a row's build_timeout_sec and ${VAR} are checked
    // first); the others are invalid rows of the run, reported by it.
    const accepted = rows.filter((row, position) => {
      try {
        parseRow(environment.implementation, row, position);
        environment.implementation.checkRow?.(row, environment);
        return true;
      } catch {
        return false;
      }
    });
    for (const row of accepted) {
      const { lowered } = taskResources(row, environment);
      if (lowered.length > 0) onNotice?.(`task ${String(row.id)}: ${lowered.join('; ')}`);
    }
    // Each task's image from its environment/Dockerfile, built by the daemon's provider (a
    // built-in base it starts FROM first); nothing again for those it has already.
    await buildHarborImages(client, accepted, logger, {
      ...(onStart === undefined ? {} : { onStart }),
      ...(onImage === undefined ? {} : { onImage }),
    });
  },
};

type EnvKey = 'environment_env' | 'solution_env' | 'verifier_env';

function envOf(row: TaskRow, key: EnvKey): Record<string, string> {
  return (row[key] ?? {}) as Record<string, string>;
}
