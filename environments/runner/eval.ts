/**
 * The evaluation runner: every (task, repeat) through sandbox -> harness -> verifier, with a
 * bounded number at once; one rollout line flushed as each finishes, failures beside them,
 * aggregate metrics at the end. Infra errors are retried a bounded number of times; `--resume`
 * skips finished rollouts and never writes a line twice.
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import type { GymClient } from '../../client/client.ts';
import { GymError, isGymError } from '../../core/errors.ts';
import type { Logger } from '../../core/logger.ts';
import {
  DEFAULT_LIMITS,
  type Harness,
  type HarnessLimits,
  type HarnessResult,
  type HarnessTask,
  type SandboxHandle,
} from '../../harnesses/harness.ts';
import { clientSandboxHandle } from '../../harnesses/sandbox-handle.ts';
import type { LoadedEnvironment } from '../environment.ts';
import { type EnvironmentKind, parseRow, rowInstruction, type TaskRow } from '../kinds/kind.ts';
import { promptText, rowConversation, rowSampling } from '../kinds/responses-input.ts';
import type { RolloutOutcome, Verdict } from '../verifiers/verifier.ts';
import { type KeptAgentFile, keepAgentFiles } from './agent-logs.ts';
import { appendJsonl, outputPaths, readJsonl, rolloutKey, writeJsonlAtomic } from './files.ts';
import { computeRewardMetrics, fieldStats, taskProfile } from './metrics.ts';
import { buildResponse, GYM_FIELDS, type GymRolloutFields, gymFields } from './rollout-line.ts';
import { configuredPrices, sumUsage, usageMetrics } from './usage.ts';

export interface EvalOptions {
  client: GymClient;
  environment: LoadedEnvironment;
  rows: Array<Record<string, unknown>>;
  harness: Harness;
  harnessName: string;
  /** The model name agents ask for (the gateway may replace it with the policy model). */
  modelName: string;
  numRepeats: number;
  concurrency: number;
  output: string;
  resume: boolean;
  /** Infra errors retried per rollout before it goes to the failures file for good. */
  maxInfraAttempts: number;
  /**
   * Serve agent sandboxes from warm pools, one per image that several rollouts share, sized to
   * the concurrency, so set-up overlaps with work. Off by default: measured on a 2-core host,
   * where CPU is the bottleneck, pools cost 15-25% of throughput; they pay where creates are slow
   * (large images, Kubernetes).
   */
  usePools?: boolean;
  /**
   * The model upstream of this run's rollouts (`gym eval run --policy-base-url`): each rollout is
   * opened with it, so it applies on a daemon already running with another (or no) upstream.
   * Default: the daemon's configured gateway upstream.
   */
  upstream?: { baseUrl: string; apiKey?: string; model?: string };
  limits?: Partial<HarnessLimits>;
  logger: Logger;
  onProgress?: (progress: EvalProgress) => void;
}

export interface EvalProgress {
  done: number;
  total: number;
  skipped: number;
  rewardSum: number;
  infraErrors: number;
  /** Rollouts whose verifier ran out of time: in the failures file, never a reward. */
  verifierTimeouts: number;
  last?: { task: unknown; rollout: unknown; outcome: RolloutOutcome; reward: number };
}

export interface EvalSummary {
  rollouts: number;
  failures: number;
  metrics: Record<string, number>;
  paths: ReturnType<typeof outputPaths>;
  durationMs: number;
}

interface Timings {
  sandboxMs: number;
  agentMs: number;
  verifyMs: number;
  totalMs: number;
}

/** Stable task indices: the row's own `_ng_task_index` if present, else its position. */
export function materialize(
  rows: Array<Record<string, unknown>>,
  numRepeats: number,
  harnessName: string,
): Array<Record<string, unknown>> {
  return rows.flatMap((row, position) =>
    Array.from({ length: numRepeats }, (_, repeat) => ({
      ...row,
      _ng_task_index: typeof row._ng_task_index === 'number' ? row._ng_task_index : position,
      _ng_rollout_index: repeat,
      agent_ref: { name: harnessName },
      responses_create_params: row.responses_create_params ?? {
        input: [{ role: 'user', content: rowInstruction(row) }],
      },
    })),
  );
}

export async function runEval(options: EvalOptions): Promise<EvalSummary> {
  const started = Date.now();
  const paths = outputPaths(options.output);
  await mkdir(dirname(resolve(options.output)), { recursive: true });
  const materialized = materialize(options.rows, options.numRepeats, options.harnessName);
  const done = new Set<string>();
  if (options.resume) {
    for (const row of await readJsonl(paths.rollouts)) done.add(rolloutKey(row));
  } else {
    await Promise.all([writeFile(paths.rollouts, ''), writeFile(paths.failures, '')]);
  }
  await writeFile(paths.materialized, materialized.map((row) => `${JSON.stringify(row)}\n`).join(''));
  // Every row is checked before any sandbox starts: a bad one goes to the failures file with the
  // field it lacks, once, and is never run (a reward from a half-read row would be a lie).
  const kind = options.environment.implementation;
  const invalid = new Set<number>();
  const recorded = new Set(
    (options.resume ? await readJsonl(paths.failures) : [])
      .filter((row) => row._ng_failure_class === 'invalid_row')
      .map((row) => row._ng_task_index),
  );
  for (const [position, row] of options.rows.entries()) {
    try {
      parseRow(kind, row, position);
      kind.checkRow?.(row, options.environment);
    } catch (error) {
      invalid.add(position);
      const reason = isGymError(error) ? error.message : String(error);
      options.logger.warn({ row: position + 1 }, reason);
      const taskIndex = typeof row._ng_task_index === 'number' ? row._ng_task_index : position;
      if (!recorded.has(taskIndex))
        await appendJsonl(paths.failures, {
          ...row,
          _ng_task_index: taskIndex,
          _ng_failure_class: 'invalid_row',
          _ng_failure_terminal: true,
          [GYM_FIELDS]: { reason },
        });
    }
  }
  if (invalid.size === options.rows.length && options.rows.length > 0)
    throw new GymError(
      'VALIDATION_FAILED',
      `no row is a valid ${kind.name} task (see ${paths.failures}); the first: ${
        gymFields(
          (await readJsonl(paths.failures)).find((row) => row._ng_failure_class === 'invalid_row') ?? {},
        ).reason
      }`,
    );
  const pending = materialized.filter(
    (row, index) => !done.has(rolloutKey(row)) && !invalid.has(Math.floor(index / options.numRepeats)),
  );
  const progress: EvalProgress = {
    done: 0,
    total: pending.length,
    skipped: materialized.length - pending.length,
    rewardSum: 0,
    infraErrors: 0,
    verifierTimeouts: 0,
  };
  const limits: HarnessLimits = {
    ...DEFAULT_LIMITS,
    ...(options.environment.limits as Partial<HarnessLimits>),
    ...options.limits,
  };
  const runId = `eval-${Date.now().toString(36)}`;
  const pools = options.usePools !== true ? new Map<string, string>() : await definePools(options, pending);

  let next = 0;
  const worker = async () => {
    while (next < pending.length) {
      const row = pending[next++]!;
      for (let attempt = 0; attempt < options.maxInfraAttempts; attempt += 1) {
        const result = await runRollout(
          pools,
          options,
          row,
          limits,
          // Readable for people, unguessable for agents: the random part is what keeps another
          // rollout's agent from naming this one.
          `${runId}-${row._ng_task_index}-${row._ng_rollout_index}-${attempt}-${randomBytes(12).toString('hex')}`,
          attempt,
        );
        const ours = gymFields(result);
        const outcome = ours.outcome as RolloutOutcome;
        const reason = (ours.verifier as { reason?: string } | undefined)?.reason;
        if (outcome === 'infra_error') {
          progress.infraErrors += 1;
          await appendJsonl(paths.failures, {
            ...result,
            _ng_failure_class: 'infra_error',
            _ng_failure_terminal: attempt + 1 >= options.maxInfraAttempts,
          });
          options.logger.warn(
            {
              task: row._ng_task_index,
              rollout: row._ng_rollout_index,
              attempt,
              reason,
            },
            'infra error; retrying',
          );
          if (attempt + 1 < options.maxInfraAttempts)
            await new Promise((resolve) => setTimeout(resolve, Math.min(10_000, 1000 * 2 ** attempt)));
          continue;
        }
        if (outcome === 'verifier_timeout') {
          // Not a reward: the verifier never judged the final state (README, "verifier timeouts").
          // Not retried either: a state that makes the tests hang would hang them again.
          progress.verifierTimeouts += 1;
          await appendJsonl(paths.failures, {
            ...result,
            reward: null,
            _ng_failure_class: 'verifier_timeout',
            _ng_failure_terminal: true,
          });
          options.logger.warn(
            { task: row._ng_task_index, rollout: row._ng_rollout_index },
            'verifier timeout: no reward, written to the failures file',
          );
          break;
        }
        if (outcome === 'verifier_error') {
          // The verifier gave no reward (a Harbor test wrote no reward file): never a 0 among the
          // rewards, and not retried (the same tests would do the same).
          await appendJsonl(paths.failures, {
            ...result,
            reward: null,
            _ng_failure_class: 'verifier_error',
            _ng_failure_terminal: true,
          });
          options.logger.warn(
            {
              task: row._ng_task_index,
              rollout: row._ng_rollout_index,
              reason,
            },
            'verifier error: no reward',
          );
          break;
        }
        await appendJsonl(paths.rollouts, result);
        progress.rewardSum += Number(result.reward);
        progress.last = {
          task: row._ng_task_index,
          rollout: row._ng_rollout_index,
          outcome,
          reward: Number(result.reward),
        };
        break;
      }
      progress.done += 1;
      options.onProgress?.({ ...progress });
    }
  };
  await Promise.all(
    Array.from({ length: Math.max(1, Math.min(options.concurrency, pending.length)) }, worker),
  );

  await Promise.all([...pools.values()].map((pool) => options.client.removePool(pool).catch(() => {})));
  // Rewrite the rollouts sorted by (task, rollout), as NeMo Gym leaves them; then the metrics.
  const rollouts = (await readJsonl(paths.rollouts)).sort(
    (left, right) =>
      Number(left._ng_task_index) - Number(right._ng_task_index) ||
      Number(left._ng_rollout_index) - Number(right._ng_rollout_index),
  );
  await writeJsonlAtomic(paths.rollouts, rollouts);
  const terminalFailures = (await readJsonl(paths.failures)).filter(
    (row) => row._ng_failure_terminal === true,
  );
  // What each task was to have: its repeats, unless its row was invalid (never run).
  const expectedByTask = new Map<number, number>();
  for (const [index, row] of materialized.entries())
    if (!invalid.has(Math.floor(index / options.numRepeats)))
      expectedByTask.set(
        Number(row._ng_task_index),
        (expectedByTask.get(Number(row._ng_task_index)) ?? 0) + 1,
      );
  const metrics = await writeMetrics(
    paths.metrics,
    rollouts,
    options.harnessName,
    terminalFailures,
    expectedByTask,
    kind,
  );
  await kind.writeReports?.({
    output: options.output,
    rows: options.rows,
    rollouts,
    harnessName: options.harnessName,
  });
  return {
    rollouts: rollouts.length,
    failures: terminalFailures.length,
    metrics,
    paths,
    durationMs: Date.now() - started,
  };
}

/**
 * One pool per image that several rollouts use (named by a hash of its spec): as many idle as
 * the concurrency allows, and never more members in all than that image's rollouts, so a pool
 * never makes a sandbox no rollout will use.
 */
async function definePools(
  options: EvalOptions,
  pending: Array<Record<string, unknown>>,
): Promise<Map<string, string>> {
  const counts = new Map<string, number>();
  for (const row of pending) {
    const image = options.environment.implementation.image(row, options.environment);
    if (image !== null) counts.set(image, (counts.get(image) ?? 0) + 1);
  }
  const pools = new Map<string, string>();
  for (const [image, count] of counts) {
    // An image a single rollout uses gains nothing from a pool: its sandbox is made when needed.
    if (count < 2) continue;
    const spec = { ...(options.environment.sandbox as object), image, labels: { role: 'agent' } };
    const name = `eval-${createHash('sha256').update(JSON.stringify(spec)).digest('hex').slice(0, 16)}`;
    const idle = Math.min(options.concurrency, count);
    await options.client.definePool(name, { spec, minIdle: idle, maxIdle: idle, maxTotal: count });
    pools.set(image, name);
  }
  return pools;
}

/** Rollouts the verifier never judged (no reward), by failure class. */
const UNJUDGED_CLASSES = ['verifier_timeout', 'verifier_error'] as const;

/**
 * The metrics file. `failures` are the run's terminal failures: verifier timeouts and verifier
 * errors are not rewards (the verifier never judged the final state), but an agent can cause
 * them (a test hung by its code, an interpreter it removed), and a policy trained only on the
 * judged rollouts would learn to cause them when it is unsure. So their rates are reported, and
 * `mean/reward_unjudged_as_0` counts them as 0: watch it next to `mean/reward`.
 */
export async function writeMetrics(
  path: string,
  rollouts: Array<Record<string, unknown>>,
  harnessName: string,
  failures: Array<Record<string, unknown>> = [],
  expectedByTask: ReadonlyMap<number, number> = new Map(),
  kind?: Pick<EnvironmentKind, 'computeMetrics' | 'keyMetrics'>,
): Promise<Record<string, number>> {
  const byTask = new Map<number, Array<Record<string, unknown>>>();
  for (const row of rollouts) {
    const task = Number(row._ng_task_index);
    byTask.set(task, [...(byTask.get(task) ?? []), row]);
  }
  const tasks = [...byTask.entries()].sort(([left], [right]) => left - right);
  const rewardsOf = (lines: Array<Record<string, unknown>>) => lines.map((row) => Number(row.reward));
  const unjudged = Object.fromEntries(
    UNJUDGED_CLASSES.map((name) => [name, failures.filter((row) => row._ng_failure_class === name).length]),
  ) as Record<(typeof UNJUDGED_CLASSES)[number], number>;
  const attempted = rollouts.length + unjudged.verifier_timeout + unjudged.verifier_error;
  const rewardSum = rollouts.reduce((sum, row) => sum + Number(row.reward), 0);
  // NeMo Gym's stats of every numeric field (metrics.ts), then ours over them.
  const agentMetrics = {
    ...fieldStats(rollouts),
    ...computeRewardMetrics(tasks.map(([, lines]) => rewardsOf(lines))),
    ...usageMetrics(rollouts),
    ...(attempted === 0
      ? {}
      : {
          'mean/reward_unjudged_as_0': rewardSum / attempted,
          'rate/verifier_timeout': unjudged.verifier_timeout / attempted,
          'rate/verifier_error': unjudged.verifier_error / attempted,
        }),
    ...(rollouts.length === 0 ? {} : kind?.computeMetrics?.(tasks.map(([, lines]) => lines))),
  };
  const keyMetrics =
    kind?.keyMetrics?.(agentMetrics) ??
    Object.fromEntries(
      Object.entries(agentMetrics).filter(([key]) => key.startsWith('mean/') || key.startsWith('pass@')),
    );
  const groupLevel = tasks.map(([task, lines]) => ({
    ...taskProfile(task, lines, expectedByTask.get(task) ?? lines.length, {
      agent_ref: { name: harnessName },
    }),
    ...computeRewardMetrics([rewardsOf(lines)]),
    ...usageMetrics(lines),
  }));
  await writeFile(
    path,
    `${JSON.stringify([{ agent_ref: { name: harnessName }, agent_metrics: agentMetrics, key_metrics: keyMetrics, group_level_metrics: groupLevel }], null, 2)}\n`,
  );
  return agentMetrics;
}

const noSandbox = () =>
  Promise.reject(new GymError('CAPABILITY_UNSUPPORTED', 'this environment gives its harness no sandbox'));
const NO_SANDBOX: SandboxHandle = { id: 'none', exec: noSandbox, writeFile: noSandbox, readFile: noSandbox };

const CONFIGURATION_ERRORS = new Set<string>([
  'VALIDATION_FAILED',
  'IMAGE_NOT_FOUND',
  'UNAUTHORIZED',
  'PROVIDER_NOT_FOUND',
  'POOL_NOT_FOUND',
]);

/**
 * The row's NeMo Gym conversation (and sampling settings) for the harnesses that send one, unless the kind gave its own;
 * and, for a kind that found no prompt in its fields, the conversation's text as the instruction.
 */
function withConversation(task: HarnessTask, row: TaskRow): HarnessTask {
  const messages = task.messages ?? rowConversation(row);
  if (messages === undefined) return task;
  const sampling = task.sampling ?? rowSampling(row);
  return {
    ...task,
    messages,
    instruction: task.instruction.trim() === '' ? promptText(messages) : task.instruction,
    ...(sampling === undefined ? {} : { sampling }),
  };
}

async function runRollout(
  pools: ReadonlyMap<string, string>,
  options: EvalOptions,
  row: TaskRow,
  limits: HarnessLimits,
  rolloutId: string,
  attempt: number,
): Promise<Record<string, unknown>> {
  const { client, harness, environment } = options;
  const kind = environment.implementation;
  const timings: Timings = { sandboxMs: 0, agentMs: 0, verifyMs: 0, totalMs: 0 };
  const started = Date.now();
  let sandboxId: string | undefined;
  let harnessResult: HarnessResult | undefined;
  let verdict: Verdict;
  let modelCalls: unknown[] = [];
  /** Why the model calls could not be read back, when they could not: never a silent empty list. */
  let modelCallsError: string | undefined;
  let agentLogs: KeptAgentFile[] = [];
  let agentLogsError: string | undefined;
  const image = kind.image(row, environment);
  const releaseSandbox = async () => {
    const id = sandboxId;
    sandboxId = undefined;
    if (id !== undefined) await client.destroySandbox(id).catch(() => {});
  };
  try {
    // A kind without an image (questions) gives its harness no sandbox: the handle refuses any use.
    if (image !== null) {
      const spec = {
        ...(environment.sandbox as object),
        ...kind.sandbox?.(row, environment),
        image,
        labels: { role: 'agent' },
      };
      const pool = pools.get(image);
      sandboxId = (
        await client.createSandbox(pool === undefined ? spec : { pool, labels: { role: 'agent' } })
      ).id;
    }
    const sandbox = sandboxId === undefined ? NO_SANDBOX : clientSandboxHandle(client, sandboxId);
    if (typeof row.setup === 'string' && row.setup !== '') {
      const setup = await sandbox.exec({ command: row.setup, cwd: '/', timeoutMs: 120_000 });
      if (setup.status !== 'ok' || setup.exitCode !== 0)
        throw new Error(
          `the task's setup failed (${setup.status}, exit ${setup.exitCode}): ${setup.stderr.slice(-500)}`,
        );
    }
    timings.sandboxMs = Date.now() - started;
    let endpoint = { baseUrl: '', basePath: '', apiKey: '', model: options.modelName };
    if (harness.needsModel) {
      const rollout = await client.openRollout({
        rolloutId,
        ...(options.upstream === undefined ? {} : { upstream: options.upstream }),
      });
      endpoint = {
        baseUrl: `${client.url}${rollout.basePath}`,
        basePath: rollout.basePath,
        apiKey: rollout.key,
        model: options.modelName,
      };
    }
    const agentStarted = Date.now();
    harnessResult = await harness.run({
      sandbox,
      task: withConversation(
        kind.task(row, environment, { usesGoldPatch: harness.usesGoldPatch === true }),
        row,
      ),
      model: endpoint,
      limits: { ...limits, ...kind.limits?.(row) },
      logger: options.logger,
    });
    timings.agentMs = Date.now() - agentStarted;
    // The agent's own files, each cut to size, beside the rollouts file; a host that cannot write
    // them loses them, not the rollout.
    agentLogs = await keepAgentFiles(
      outputPaths(options.output).agentLogs,
      rolloutId,
      harnessResult.agentFiles ?? [],
    ).catch((error: unknown) => {
      agentLogsError = String(error);
      return [];
    });
    if (harness.needsModel) {
      modelCalls = await client.rolloutRecords(rolloutId).catch((error: unknown) => {
        modelCallsError = isGymError(error) ? `${error.code}: ${error.message}` : String(error);
        return [];
      });
    }
    const verifyStarted = Date.now();
    if (harnessResult.outcome === 'sandbox_gone' || harnessResult.outcome === 'infra_error')
      verdict = {
        outcome: 'infra_error',
        reward: 0,
        details: {
          reason:
            harnessResult.outcome === 'sandbox_gone'
              ? 'the agent sandbox went away'
              : `the harness hit an infrastructure fault: ${harnessResult.message ?? 'unknown'}`,
        },
      };
    else if (harnessResult.outcome === 'agent_error')
      verdict = {
        outcome: 'agent_error',
        reward: 0,
        details: { reason: harnessResult.message ?? 'agent error' },
      };
    else
      verdict = await kind.verify({
        client,
        environment,
        row,
        sandbox,
        harnessResult,
        releaseSandbox,
        logger: options.logger,
      });
    timings.verifyMs = Date.now() - verifyStarted;
  } catch (error) {
    // A mistake in the run's set-up (no such image, no model upstream) fails every rollout alike:
    // stop the run and say so, rather than retrying it as an outage.
    if (isGymError(error, 'IMAGE_NOT_FOUND') && image !== null && kind.describeMissingImage !== undefined)
      throw new GymError('IMAGE_NOT_FOUND', kind.describeMissingImage(image, row), {
        details: { image },
        cause: error,
      });
    if (isGymError(error) && CONFIGURATION_ERRORS.has(error.code)) throw error;
    verdict = {
      outcome: 'infra_error',
      reward: 0,
      details: { reason: isGymError(error) ? `${error.code}: ${error.message}` : String(error) },
    };
  } finally {
    await releaseSandbox();
    if (harness.needsModel) await client.closeRollout(rolloutId).catch(() => {});
  }
  timings.totalMs = Date.now() - started;
  // NeMo Gym's keys at the top level, with its types (rollout-line.ts); ours in one object beside them.
  const usage = harness.needsModel
    ? // Tokens summed from the gateway's records, priced when environment.json or the run sets both prices.
      sumUsage(modelCalls, configuredPrices(environment.limits, options.limits))
    : undefined;
  const gym: GymRolloutFields = {
    outcome: verdict.outcome,
    verifier: verdict.details,
    harness: {
      outcome: harnessResult?.outcome ?? null,
      submission: harnessResult?.submission ?? null,
      message: harnessResult?.message ?? null,
    },
    trajectory: harnessResult?.trajectory ?? [],
    model_calls: modelCalls,
    ...(modelCallsError === undefined ? {} : { model_calls_error: modelCallsError }),
    ...(agentLogs.length === 0 ? {} : { agent_logs: agentLogs }),
    ...(agentLogsError === undefined ? {} : { agent_logs_error: agentLogsError }),
    ...(usage === undefined ? {} : { usage }),
    timings,
    sandbox: { image },
  };
  return {
    ...row,
    _ng_attempt_index: attempt,
    _ng_rollout_id: rolloutId,
    // Before `response` and `reward`, so a verifier's field can never stand in for either.
    ...verdict.fields,
    response: buildResponse({
      rolloutId,
      startedAtMs: started,
      modelName: options.modelName,
      params: row.responses_create_params,
      harnessResult,
      modelCalls,
      usage,
    }),
    reward: verdict.reward,
    [GYM_FIELDS]: gym,
  };
}
