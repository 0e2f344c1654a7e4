/**
 * The `harbor` kind: Harbor task directories (task-directory.ts reads them into rows). The agent
 * works in a sandbox of the task's image from the image's working directory; after it finishes,
 * its processes are stopped, `tests/` is copied to /tests and test.sh run as Harbor runs it
 * (environments/verifiers/script.ts); the oracle runs `solution/solve.sh` from /solution.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { z } from 'zod';
import { GymError, isGymError } from '../../../core/errors.ts';
import type { NetworkPolicy } from '../../../core/schemas/sandbox.ts';
import type { ServiceSpecInput } from '../../../core/schemas/services.ts';
import { type TaskNetworkPolicy, TaskNetworkPolicySchema } from '../../../core/schemas/task-network.ts';
import { EgressConfigSchema } from '../../../daemon/egress/config.ts';
import type { HarnessTask } from '../../../harnesses/harness.ts';
import type { LoadedEnvironment } from '../../environment.ts';
import { verifyScript } from '../../verifiers/script.ts';
import type { Verdict } from '../../verifiers/verifier.ts';
import { nonEmpty, sandboxPath } from '../fields.ts';
import { type EnvironmentKind, parseRow, type TaskRow } from '../kind.ts';
import type { ComposeServiceRow } from './compose.ts';
import { runHarborHealthcheck } from './healthcheck.ts';
import { buildHarborImages } from './images.ts';
import {
  DEFAULT_EGRESS_CAP,
  DEFAULT_TASK_NETWORK,
  type DeclaredNetwork,
  decideNetwork,
  type EgressCap,
  opensAnything,
} from './network.ts';
import { verifySeparately } from './separate-verifier.ts';
import { composeServiceSpec, MAX_BUILD_TIMEOUT_SEC, resolveTaskEnv } from './task-directory.ts';
import { readTaskFile, refuseTaskLinkOut } from './task-links.ts';
import type { HarborRow } from './task-row.ts';

const Env = z.record(z.string(), z.string());
const Seconds = z
  .number()
  .positive()
  .max(7 * 24 * 3600);

const PolicySchema = z.object({
  mode: z.enum(['public', 'no-network', 'allowlist']),
  allowed_hosts: z.array(z.string()).optional(),
});

const TaskRowSchema = z.looseObject({
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
  declared_network: z
    .object({
      environment: PolicySchema.nullable().optional(),
      agent: PolicySchema.nullable(),
      verifier: PolicySchema.nullable(),
    })
    .default({ agent: null, verifier: null }),
});

/**
 * A Harbor row: a task the reader refused (`refused`: a feature not supported, an image that
 * could not be built) fails with its reason alone, never with the fields it lacks for that.
 */
export const HarborRowSchema: z.ZodType<TaskRow> = z.unknown().transform((row, context) => {
  const refused = (row as { refused?: unknown } | null)?.refused;
  if (typeof refused === 'string') {
    context.addIssue({ code: 'custom', message: refused });
    return z.NEVER;
  }
  const parsed = TaskRowSchema.safeParse(row);
  if (parsed.success) return parsed.data as TaskRow;
  for (const issue of parsed.error.issues) context.addIssue(issue as never);
  return z.NEVER;
});

/** The operator's rule for tasks' network (`taskNetwork` of GYM_CONFIG, which `gym eval run` puts in the options). */
export function operatorTaskNetwork(environment: LoadedEnvironment): TaskNetworkPolicy {
  const given = (environment.options as { taskNetwork?: unknown } | undefined)?.taskNetwork;
  if (given === undefined) return DEFAULT_TASK_NETWORK;
  const parsed = TaskNetworkPolicySchema.safeParse(given);
  if (!parsed.success)
    throw new GymError(
      'VALIDATION_FAILED',
      `environment ${environment.name}: options.taskNetwork: ${parsed.error.issues.map((issue) => issue.message).join('; ')}`,
    );
  return parsed.data;
}

/**
 * The operator's cap on what a task's network may open (`egress` of GYM_CONFIG, which `gym eval
 * run` puts in the options; the daemon it talks to enforces its own again): nothing by default.
 */
export function operatorEgressCap(environment: LoadedEnvironment): EgressCap {
  const given = (environment.options as { egress?: unknown } | undefined)?.egress;
  if (given === undefined) return DEFAULT_EGRESS_CAP;
  const parsed = EgressConfigSchema.safeParse(given);
  if (!parsed.success)
    throw new GymError(
      'VALIDATION_FAILED',
      `environment ${environment.name}: options.egress: ${parsed.error.issues.map((issue) => issue.message).join('; ')}`,
    );
  return { allowPublic: parsed.data.allowPublic, allowedHosts: parsed.data.allowedHosts };
}

function networkOf(row: TaskRow, environment: LoadedEnvironment) {
  const declared = (row.declared_network ?? { agent: null, verifier: null }) as DeclaredNetwork;
  return {
    declared,
    decision: decideNetwork(declared, {
      taskNetwork: operatorTaskNetwork(environment),
      egress: operatorEgressCap(environment),
    }),
  };
}

/** Whether any phase of the task opens anything (else no switch is made and no log kept). */
const needsEgress = (row: TaskRow, environment: LoadedEnvironment) =>
  Object.values(networkOf(row, environment).decision.applied).some(opensAnything);

/**
 * A phase's policy the daemon refused (its egress configuration is narrower than the one this
 * run read): the tests cannot run as the task declares them, a verifier error (no reward, not
 * retried) that names the setting. Anything else is thrown on.
 */
function refusedPolicy(error: unknown, policy: NetworkPolicy): Verdict {
  if (!isGymError(error, 'FORBIDDEN_BY_CONFIG')) throw error;
  return {
    outcome: 'verifier_error',
    reward: 0,
    details: {
      reason: `the verifier phase's network (${policy.mode}${policy.mode === 'allowlist' ? ` [${policy.allowedHosts.join(', ')}]` : ''}) is refused by the daemon's egress configuration: ${error.message}`,
    },
  };
}

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
 * The most a task's sandbox may have: the operator's `maxResources` (GYM_CONFIG, which `gym eval
 * run` puts in the environment's options), else no cap but the schema's. A task asks for its own
 * cpus and memory_mb over the environment's defaults; one that asks for more than the cap is
 * refused, never run with less than it asked for.
 */
export function resourceCeiling(environment: LoadedEnvironment): { cpus?: number; memoryMiB?: number } {
  const caps = (environment.options as { maxResources?: { cpus?: number; memoryMiB?: number } } | undefined)
    ?.maxResources;
  return {
    ...(typeof caps?.cpus === 'number' ? { cpus: caps.cpus } : {}),
    ...(typeof caps?.memoryMiB === 'number' ? { memoryMiB: caps.memoryMiB } : {}),
  };
}

/** A task's cpus and memory_mb as it asks, with what is over the operator's cap (it then cannot run). */
export function taskResources(
  row: TaskRow,
  environment: LoadedEnvironment,
): { cpus?: number; memoryMiB?: number; over: string[] } {
  const ceiling = resourceCeiling(environment);
  const over: string[] = [];
  const check = (asked: unknown, most: number | undefined, field: string, setting: string) => {
    if (typeof asked !== 'number') return undefined;
    if (most !== undefined && asked > most)
      over.push(
        `task.toml asks for ${field} = ${asked}, more than the operator allows (maxResources.${setting} is ${most})`,
      );
    return asked;
  };
  const cpus = check(row.cpus, ceiling.cpus, 'cpus', 'cpus');
  const memoryMiB = check(row.memory_mb, ceiling.memoryMiB, 'memory_mb', 'memoryMiB');
  return {
    ...(cpus === undefined ? {} : { cpus }),
    ...(memoryMiB === undefined ? {} : { memoryMiB }),
    over,
  };
}

/** The solution folder as files under /solution, solve.sh made executable (Harbor chmods it). */
function solutionFiles(taskDir: string): Array<{ path: string; content: Buffer; mode: number }> {
  refuseTaskLinkOut(taskDir, 'solution', 'folder');
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

const isFile = (path: string) => {
  try {
    return statSync(path).isFile();
  } catch {
    return false;
  }
};

const isTerminalBench = (row: TaskRow) => row.format === 'terminal-bench';

/** The oracle's script and its files: Harbor's solution/solve.sh, Terminal-Bench's solution.sh. */
function oracleOf(row: TaskRow): Pick<HarnessTask, 'solution' | 'solutionFiles'> | undefined {
  const taskDir = String(row.task_dir);
  if (isTerminalBench(row)) {
    const script = readTaskFile(taskDir, 'solution.sh');
    if (script === null) return undefined;
    // Terminal-Bench's harness runs it with bash from the container's working directory.
    return {
      solution: 'bash /solution/solution.sh',
      solutionFiles: [{ path: '/solution/solution.sh', content: script, mode: 0o755 }],
    };
  }
  if (!isFile(join(taskDir, 'solution', 'solve.sh'))) return undefined;
  return { solution: '/solution/solve.sh', solutionFiles: solutionFiles(taskDir) };
}

export const kind: EnvironmentKind = {
  name: 'harbor',
  rowSchema: HarborRowSchema,
  image: (row) => String(row.image),
  // Fails before any sandbox starts: a `${VAR}` the operator did not allow, in any of the three.
  checkRow: (row, environment) => {
    const { over } = taskResources(row, environment);
    if (over.length > 0)
      throw new GymError('VALIDATION_FAILED', `task ${String(row.id)}: ${over.join('; ')}`);
    const { decision } = networkOf(row, environment);
    if (decision.refused !== undefined)
      throw new GymError('VALIDATION_FAILED', `task ${String(row.id)} ${decision.refused}`);
    taskEnv(row, environment, 'environment_env', '[environment]');
    taskEnv(row, environment, 'verifier_env', '[verifier]');
    taskEnv(row, environment, 'solution_env', '[solution]');
    companionServices(row, environment);
  },
  // task.toml's env over the environment's, its cpus and memory_mb over the environment's
  // defaults (whose pids limit stays). Its network is `network`'s, set by the runner. A Compose
  // task's other services run beside it (compose.ts).
  sandbox: (row, environment) => {
    const { over: _over, ...asked } = taskResources(row, environment);
    const services = companionServices(row, environment);
    return {
      ...(services.length === 0 ? {} : { services }),
      workdir: String(row.workdir),
      env: {
        ...((environment.sandbox as { env?: object }).env ?? {}),
        ...taskEnv(row, environment, 'environment_env', '[environment]'),
      },
      resources: { ...((environment.sandbox as { resources?: object }).resources ?? {}), ...asked },
    };
  },
  async startSandbox({ row, sandbox }) {
    const command = entrypointCommand(row);
    if (command !== undefined) {
      const started = await sandbox.exec({ command, cwd: String(row.workdir), timeoutMs: 30_000 });
      if (started.status !== 'ok' || started.exitCode !== 0)
        throw new Error(
          `the image's ENTRYPOINT could not be started (${started.status}, exit ${started.exitCode})`,
        );
    }
    const healthcheck = row.healthcheck as HarborRow['healthcheck'];
    if (healthcheck !== undefined)
      await runHarborHealthcheck(sandbox, healthcheck, { cwd: String(row.workdir) });
  },
  network: (row, environment) => networkOf(row, environment).decision.applied,
  limits: (row) =>
    typeof row.agent_timeout_sec === 'number' ? { wallTimeMs: row.agent_timeout_sec * 1000 } : {},
  task: (row, environment, options) => {
    return {
      id: String(row.id),
      instruction: String(row.instruction),
      workdir: String(row.workdir),
      // tests/test.sh judges the final state; the workdir need not be a git repository.
      graded: 'state',
      ...(options.usesGoldPatch && oracleOf(row) !== undefined
        ? {
            ...oracleOf(row),
            solutionEnv: {
              DEBIAN_FRONTEND: 'noninteractive',
              ...taskEnv(row, environment, 'solution_env', '[solution]'),
            },
          }
        : {}),
    };
  },
  verify: (context) => {
    const { row, sandbox, environment, client } = context;
    const separate = separateOf(row);
    const verifierPolicy = networkOf(row, environment).decision.applied.verifier;
    const egress = needsEgress(row, environment);
    const test = {
      workdir: separate?.workdir ?? String(row.workdir),
      env: taskEnv(row, environment, 'verifier_env', '[verifier]'),
      ...(typeof row.verifier_user === 'string' ? { user: row.verifier_user } : {}),
    };
    if (separate !== undefined)
      return verifySeparately(context, {
        image: separate.image,
        workdir: separate.workdir,
        artifacts: (row.artifacts as string[] | undefined) ?? [],
        timeoutMs: Number(row.verifier_timeout_sec) * 1000,
        test,
        spec: {
          env: {
            ...((environment.sandbox as { env?: object }).env ?? {}),
            ...resolveTaskEnv(
              separate.env,
              process.env,
              'task.toml [verifier.environment] env',
              allowedTaskEnv(environment),
            ),
          },
          resources: {
            ...((environment.sandbox as { resources?: object }).resources ?? {}),
            ...(separate.cpus === undefined ? {} : { cpus: separate.cpus }),
            ...(separate.memory_mb === undefined ? {} : { memoryMiB: separate.memory_mb }),
          },
          network: opensAnything(verifierPolicy) ? verifierPolicy : 'none',
        },
        ...(egress ? { network: { refused: (error: unknown) => refusedPolicy(error, verifierPolicy) } } : {}),
      });
    return verifyScript(
      sandbox,
      join(String(row.task_dir), 'tests'),
      Number(row.verifier_timeout_sec) * 1000,
      {
        ...test,
        ...(isTerminalBench(row) ? { terminalBench: { runTests: runTestsOf(String(row.task_dir)) } } : {}),
        ...(entrypointCommand(row) === undefined ? {} : { startCommand: entrypointCommand(row)! }),
        // The verifier's policy once nothing of the agent runs: the switch cuts every tunnel the
        // agent opened, and the tests get exactly what [verifier] declares.
        ...(egress
          ? {
              beforeTests: async () => {
                try {
                  await client.setNetwork(sandbox.id, verifierPolicy);
                } catch (error) {
                  return refusedPolicy(error, verifierPolicy);
                }
                context.network?.mark(sandbox.id, 'verifier');
                return null;
              },
            }
          : {}),
      },
    );
  },
  // What the task declared and what it got, so a reward earned without the network it declared
  // is never taken for a real one; and every metric of reward.json.
  describeRollout: (row, environment, verdict) => {
    const { declared, decision } = networkOf(row, environment);
    const rewards = verdict.details.rewards;
    return {
      verifier_environment: separateOf(row) === undefined ? 'shared' : 'separate',
      network: {
        declared,
        applied: decision.applied,
        ...(decision.capped.length === 0 ? {} : { capped: decision.capped }),
      },
      ...(typeof rewards === 'object' && rewards !== null ? { rewards } : {}),
    };
  },
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
      const { capped } = networkOf(row, environment).decision;
      if (capped.length > 0) onNotice?.(`task ${String(row.id)}: ${capped.join('; ')}`);
    }
    // Each task's image from its environment/Dockerfile, built by the daemon's provider (a
    // built-in base it starts FROM first); nothing again for those it has already.
    const progress = {
      ...(onStart === undefined ? {} : { onStart }),
      ...(onImage === undefined ? {} : { onImage }),
    };
    await buildHarborImages(client, accepted, logger, progress);
    // A separate verifier's image, from tests/ (or its docker_image): a task whose verifier
    // image cannot be made fails like one whose own image cannot.
    const verifiers = accepted.flatMap((row) => {
      const separate = separateOf(row);
      if (row.refused !== undefined || separate === undefined) return [];
      const tests = join(String(row.task_dir), 'tests');
      return [
        {
          owner: row,
          row: {
            id: `${String(row.id)} (its separate verifier)`,
            task_dir: String(row.task_dir),
            image: separate.image,
            build: separate.build,
            workdir: separate.workdir,
            build_context: tests,
            dockerfile: join(tests, 'Dockerfile'),
            build_timeout_sec: separate.build_timeout_sec,
          } as Record<string, unknown>,
        },
      ];
    });
    await buildHarborImages(
      client,
      verifiers.map((verifier) => verifier.row),
      logger,
      progress,
    );
    await buildServiceImages(client, accepted, logger, progress);
    for (const { owner, row } of verifiers) {
      if (typeof row.refused === 'string') owner.refused = `the separate verifier's image: ${row.refused}`;
      else owner.verifier_environment = { ...separateOf(owner)!, workdir: String(row.workdir) };
    }
  },
};

/**
 * A Compose task's other services as the sandbox spec takes them (`spec.services`), their
 * environment's `${VAR}` resolved as task.toml's [environment] env is.
 */
function companionServices(row: TaskRow, environment: LoadedEnvironment): ServiceSpecInput[] {
  const services = (row.services ?? []) as ComposeServiceRow[];
  return services.map((service) => composeServiceSpec(service, process.env, allowedTaskEnv(environment)));
}

/** The images of Compose services built from the task (a task whose service image fails is refused). */
async function buildServiceImages(
  client: Parameters<typeof buildHarborImages>[0],
  rows: ReadonlyArray<TaskRow>,
  logger: Parameters<typeof buildHarborImages>[2],
  progress: Parameters<typeof buildHarborImages>[3],
): Promise<void> {
  const builds = rows.flatMap((row) =>
    row.refused !== undefined
      ? []
      : ((row.services ?? []) as ComposeServiceRow[]).map((service) => ({
          owner: row,
          row: {
            id: `${String(row.id)} (its service ${service.name})`,
            task_dir: String(row.task_dir),
            image: service.image,
            build: service.build,
            workdir: '/',
            ...(service.build
              ? { build_context: service.build_context, dockerfile: service.dockerfile }
              : {}),
            build_timeout_sec: Number(row.build_timeout_sec ?? 600),
          } as Record<string, unknown>,
        })),
  );
  await buildHarborImages(
    client,
    builds.map((build) => build.row),
    logger,
    progress,
  );
  for (const { owner, row } of builds)
    if (typeof row.refused === 'string' && owner.refused === undefined)
      owner.refused = `the image of its service ${String(row.id).replace(/.*its service (.*)\)$/, '$1')}: ${row.refused}`;
}

/** A row's separate verifier, when the task has one. */
function separateOf(row: TaskRow): NonNullable<HarborRow['verifier_environment']> | undefined {
  return row.verifier_environment as HarborRow['verifier_environment'];
}

const quote = (word: string) => `'${word.replaceAll("'", `'\\''`)}'`;

/**
 * The image's ENTRYPOINT as Harbor runs it: with Harbor's keepalive (`sh -c "sleep infinity"`)
 * for arguments in place of the image's CMD, so an entrypoint that starts services and then
 * `exec "$@"`s keeps them up. Here the sandbox's own keeper is its first process, so it runs in
 * the background from the working directory; undefined when the image has none.
 */
export function entrypointCommand(row: TaskRow): string | undefined {
  const entrypoint = row.entrypoint;
  if (!Array.isArray(entrypoint) || entrypoint.length === 0) return undefined;
  const argv = [...entrypoint.map(String), 'sh', '-c', 'sleep infinity'];
  return `${argv.map(quote).join(' ')} </dev/null >/dev/null 2>&1 &`;
}

/** A Terminal-Bench task's run-tests.sh, or null when it has none. */
function runTestsOf(taskDir: string): Buffer | null {
  return readTaskFile(taskDir, 'run-tests.sh');
}

type EnvKey = 'environment_env' | 'solution_env' | 'verifier_env';

function envOf(row: TaskRow, key: EnvKey): Record<string, string> {
  return (row[key] ?? {}) as Record<string, string>;
}
