/**
 * The `harbor` kind: Harbor task directories (task-directory.ts reads them into rows). The agent
 * works in a sandbox of the task's image from the image's working directory; after it finishes,
 * its processes are stopped, `tests/` is copied to /tests and test.sh run as Harbor runs it
 * (environments/verifiers/script.ts); the oracle runs `solution/solve.sh` from /solution.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { z } from 'zod';
import { verifyScript } from '../../verifiers/script.ts';
import { nonEmpty, sandboxPath } from '../fields.ts';
import type { EnvironmentKind, TaskRow } from '../kind.ts';
import { resolveTaskEnv } from './task-directory.ts';

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
});

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
  // task.toml's env, cpus and memory_mb over the environment's (whose pids limit stays).
  sandbox: (row, environment) => ({
    workdir: String(row.workdir),
    env: {
      ...((environment.sandbox as { env?: object }).env ?? {}),
      ...resolveTaskEnv(envOf(row, 'environment_env'), process.env, 'task.toml [environment] env'),
    },
    resources: {
      ...((environment.sandbox as { resources?: object }).resources ?? {}),
      ...(typeof row.cpus === 'number' ? { cpus: row.cpus } : {}),
      ...(typeof row.memory_mb === 'number' ? { memoryMiB: row.memory_mb } : {}),
    },
  }),
  limits: (row) =>
    typeof row.agent_timeout_sec === 'number' ? { wallTimeMs: row.agent_timeout_sec * 1000 } : {},
  task: (row, _environment, options) => {
    const taskDir = String(row.task_dir);
    return {
      id: String(row.id),
      instruction: String(row.instruction),
      workdir: String(row.workdir),
      ...(options.usesGoldPatch && hasSolution(taskDir)
        ? {
            solution: '/solution/solve.sh',
            solutionFiles: solutionFiles(taskDir),
            solutionEnv: {
              DEBIAN_FRONTEND: 'noninteractive',
              ...resolveTaskEnv(envOf(row, 'solution_env'), process.env, 'task.toml [solution] env'),
            },
          }
        : {}),
    };
  },
  verify: ({ row, sandbox }) =>
    verifyScript(sandbox, join(String(row.task_dir), 'tests'), Number(row.verifier_timeout_sec) * 1000, {
      workdir: String(row.workdir),
      env: resolveTaskEnv(envOf(row, 'verifier_env'), process.env, 'task.toml [verifier] env'),
      ...(typeof row.verifier_user === 'string' ? { user: row.verifier_user } : {}),
    }),
  // The final state is gone with the sandbox: a Harbor rollout keeps its reward.
};

function envOf(
  row: TaskRow,
  key: 'environment_env' | 'solution_env' | 'verifier_env',
): Record<string, string> {
  return (row[key] ?? {}) as Record<string, string>;
}
