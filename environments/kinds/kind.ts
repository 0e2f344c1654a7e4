/**
 * What an environment kind is to the eval runner: how its rows are checked, which sandbox a
 * rollout's agent gets, what the harness is told, and how the final state is graded. The runner
 * calls only this interface, so a new kind is a new folder `environments/kinds/<name>/kind.ts`
 * exporting `kind` (or, for an environment kept outside this repository, a module named by a
 * relative path in its `environment.json`), never an edit of the runner.
 */
import { access } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { z } from 'zod';
import type { GymClient } from '../../client/client.ts';
import { GymError } from '../../core/errors.ts';
import type { Logger } from '../../core/logger.ts';
import type { NetworkPolicy } from '../../core/schemas/sandbox.ts';
import type { HarnessLimits, HarnessResult, HarnessTask, SandboxHandle } from '../../harnesses/harness.ts';
import type { EnvironmentDefinition } from '../definition.ts';
import type { Verdict } from '../verifiers/verifier.ts';
import { promptText, ResponsesCreateParamsSchema, rowConversation } from './responses-input.ts';

/** An environment as the runner gets it: its definition, where it lives, and its kind's code. */
export interface LoadedEnvironment extends EnvironmentDefinition {
  directory: string;
  dataPath: string;
  /** The kind's implementation, loaded with the environment so a bad kind fails before any run. */
  implementation: EnvironmentKind;
}

/** A task row after its kind checked it: the row's own fields, kept as they came. */
export type TaskRow = Record<string, unknown>;

export interface TaskOptions {
  /** The harness applies the reference solution (the oracle): give it the gold fields. */
  usesGoldPatch: boolean;
}

/** What `verify` gets once the harness has finished with a graded outcome. */
export interface VerifyContext {
  client: GymClient;
  environment: LoadedEnvironment;
  row: TaskRow;
  /** The agent's sandbox; refuses every use when the kind asked for none. */
  sandbox: SandboxHandle;
  harnessResult: HarnessResult;
  /** Destroys the agent's sandbox now (idempotent), for kinds that grade in a fresh one. */
  releaseSandbox(): Promise<void>;
  logger: Logger;
  /**
   * For a kind with {@link EnvironmentKind.network}: say when a sandbox's policy for a phase took
   * effect (the verifier's switch), and read a sandbox's egress log before destroying it (a
   * separate verifier's), so the rollout's records keep every attempt.
   */
  network?: {
    mark(sandboxId: string, phase: 'verifier'): void;
    read(sandboxId: string, role: 'verifier'): Promise<void>;
  };
}

/** A sandbox's egress policy in each phase of a rollout (docs/egress.md). */
export type PhaseNetwork = Record<'environment' | 'agent' | 'verifier', NetworkPolicy>;

/** What `writeReports` gets once a run has finished. */
export interface RunReportContext {
  /** The run's rollouts file (`X.jsonl`); a kind's own files go beside it. */
  output: string;
  /** Every input row, valid or not. */
  rows: ReadonlyArray<TaskRow>;
  /** The finished rollouts, sorted by task and repeat. */
  rollouts: ReadonlyArray<Record<string, unknown>>;
  harnessName: string;
}

/**
 * What `prepareImages` gets: the daemon that runs the rollouts (its provider makes the images),
 * the run's rows, and where to report progress (the CLI draws it).
 */
export interface PrepareImagesContext {
  client: GymClient;
  environment: LoadedEnvironment;
  /**
   * The rows this run has (after `--limit`), valid or not: only their images are prepared. A
   * kind may set fields the rollouts need that only the image knows (Harbor: `workdir`).
   */
  rows: ReadonlyArray<TaskRow>;
  logger: Logger;
  /** Before each distinct image is looked at (and built when missing), with its place among them. */
  onStart?(reference: string, index: number, total: number): void;
  /** After each image: whether it had to be built, and how long that took. */
  onImage?(reference: string, built: boolean, durationMs: number): void;
  /** A line for the user about the run's tasks or images (a task's network capped, say). */
  onNotice?(message: string): void;
}

export interface EnvironmentKind {
  readonly name: string;
  /**
   * The fields a row must have, checked before any sandbox starts. The schema should pass unknown
   * fields through (rows carry NeMo Gym's bookkeeping); a failure names the row and the field.
   */
  readonly rowSchema: z.ZodType<TaskRow>;
  /** The image of the agent's sandbox, or null when the kind gives its harness no sandbox. */
  image(row: TaskRow, environment: LoadedEnvironment): string | null;
  /** What the harness is told. */
  task(row: TaskRow, environment: LoadedEnvironment, options: TaskOptions): HarnessTask;
  /**
   * Sandbox settings of this row's agent sandbox over the environment's (resources a task asks
   * for, say). Optional; the image is always `image()`'s.
   */
  sandbox?(row: TaskRow, environment: LoadedEnvironment): Record<string, unknown>;
  /**
   * The egress policy of each phase, for kinds whose tasks declare network (Harbor): the runner
   * creates the agent's sandbox with `environment`'s and switches it to `agent`'s before the
   * harness runs; `verify` applies `verifier`'s itself, once the agent's processes are stopped (a
   * switch cuts the connections open before it). Absent: the spec's network for the whole rollout.
   */
  network?(row: TaskRow, environment: LoadedEnvironment): PhaseNetwork;
  /** Harness limits of this row over the environment's and the run's (a task's own time limit). Optional. */
  limits?(row: TaskRow): Partial<HarnessLimits>;
  /** Grades the final state. Only faults from outside the sandbox may be `infra_error`. */
  verify(context: VerifyContext): Promise<Verdict>;
  /**
   * Grades a stored rollout again without running an agent; null when the kind cannot (its final
   * state is gone with the sandbox). Absent means never.
   */
  reverify?(client: GymClient, environment: LoadedEnvironment, row: TaskRow): Promise<Verdict | null>;
  /**
   * Checks what the schema cannot, with the environment at hand (its options); throws a
   * `VALIDATION_FAILED` naming the field. Runs with the schema, before any sandbox starts.
   */
  checkRow?(row: TaskRow, environment: LoadedEnvironment): void;
  /** The message when a row's image is missing: how to build or load it (images are never pulled). */
  describeMissingImage?(image: string, row: TaskRow): string;
  /**
   * Makes the images of the run's rows on the daemon's provider before any rollout (nothing for
   * those it has already); `gym eval run` calls it. Absent: the rows' images must exist. A failure
   * that the run cannot go on from is thrown; one it can (images that may exist) is a notice.
   */
  prepareImages?(context: PrepareImagesContext): Promise<void>;
  /**
   * Runs once the agent's sandbox is up, before the harness (a Harbor image's ENTRYPOINT, started
   * in the background). A throw is an infra error of the rollout. Optional.
   */
  startSandbox?(context: {
    row: TaskRow;
    sandbox: SandboxHandle;
    environment: LoadedEnvironment;
  }): Promise<void>;
  /**
   * This kind's own facts about a rollout (a Harbor task's declared and applied network, every
   * metric of its reward.json), which the rollout line keeps under `_gym.task`, with our other fields,
   * where no NeMo Gym field can collide with them. Optional.
   */
  describeRollout?(row: TaskRow, environment: LoadedEnvironment, verdict: Verdict): Record<string, unknown>;
  /**
   * The kind's own metrics over a run's judged rollouts, as its NeMo Gym resources server's
   * `compute_metrics` gives them (`tasks[i]`: task i's lines in rollout order); merged into the
   * agent metrics. Optional.
   */
  computeMetrics?(tasks: ReadonlyArray<ReadonlyArray<Record<string, unknown>>>): Record<string, number>;
  /** The headline metrics, as that server's `get_key_metrics`; default: every `mean/` and `pass@` one. */
  keyMetrics?(agentMetrics: Record<string, number>): Record<string, number>;
  /** Writes the kind's own report files beside the run's (SWE-bench's report.json). */
  writeReports?(context: RunReportContext): Promise<void>;
}

export const BUILT_IN_KINDS_DIR = dirname(fileURLToPath(import.meta.url));
const KIND_NAME = /^[a-z][a-z0-9-]{0,62}$/;

function isEnvironmentKind(value: unknown): value is EnvironmentKind {
  const candidate = value as Partial<EnvironmentKind> | undefined;
  return (
    typeof candidate === 'object' &&
    candidate !== null &&
    typeof candidate.name === 'string' &&
    typeof candidate.image === 'function' &&
    typeof candidate.task === 'function' &&
    typeof candidate.verify === 'function' &&
    typeof candidate.rowSchema?.safeParse === 'function'
  );
}

/** Names of the built-in kinds (folders beside this file with a kind.ts). */
export async function builtInKinds(): Promise<string[]> {
  const { readdir } = await import('node:fs/promises');
  const entries = await readdir(BUILT_IN_KINDS_DIR, { withFileTypes: true });
  const names: string[] = [];
  for (const entry of entries) {
    if (!entry.isDirectory()) continue;
    const present = await access(join(BUILT_IN_KINDS_DIR, entry.name, 'kind.ts')).then(
      () => true,
      () => false,
    );
    if (present) names.push(entry.name);
  }
  return names.sort();
}

/**
 * The kind an environment names: a built-in kind's name, or a module path relative to the
 * environment's folder (`./kind.ts`) that exports `kind`.
 */
export async function loadKind(specifier: string, environmentDirectory: string): Promise<EnvironmentKind> {
  const isModule = specifier.startsWith('./') || specifier.startsWith('../');
  if (!isModule && !KIND_NAME.test(specifier))
    throw new GymError(
      'VALIDATION_FAILED',
      `environment kind "${specifier}" is not a kind name or a ./module path`,
    );
  const path = isModule
    ? join(environmentDirectory, specifier)
    : join(BUILT_IN_KINDS_DIR, specifier, 'kind.ts');
  let loaded: Record<string, unknown>;
  try {
    loaded = (await import(pathToFileURL(path).href)) as Record<string, unknown>;
  } catch (error) {
    const known = isModule ? '' : `; built in: ${(await builtInKinds()).join(', ')}`;
    throw new GymError(
      'VALIDATION_FAILED',
      `cannot load environment kind "${specifier}": ${(error as Error).message}${known}`,
      { cause: error },
    );
  }
  const kind = loaded.kind ?? loaded.default;
  if (!isEnvironmentKind(kind))
    throw new GymError(
      'VALIDATION_FAILED',
      `environment kind module "${specifier}" must export \`kind\` with name, rowSchema, image, task and verify`,
    );
  return kind;
}

/**
 * Checks a row against its kind's schema; the error names the row (1-based) and the field. A row's
 * NeMo Gym prompt (`responses_create_params`) is checked on its own, then the kind's fields: one
 * intersected schema cannot merge a field the kind decodes (SWE-bench's JSON-encoded test lists)
 * with the same field passed through as it came, and refused every such row.
 */
export function parseRow(kind: EnvironmentKind, row: TaskRow, position: number): TaskRow {
  // Any kind's row may carry NeMo Gym's prompt: when it does, it must be one a model can be sent.
  const issues: z.core.$ZodIssue[] = [];
  if (row.responses_create_params !== undefined) {
    const params = ResponsesCreateParamsSchema.safeParse(row.responses_create_params);
    if (!params.success)
      issues.push(
        ...params.error.issues.map((issue) => ({
          ...issue,
          path: ['responses_create_params', ...issue.path],
        })),
      );
  }
  const result = kind.rowSchema.safeParse(row);
  if (!result.success) issues.push(...result.error.issues);
  if (result.success && issues.length === 0) return result.data;
  const text = issues
    .map((issue) => `${issue.path.length === 0 ? '(row)' : issue.path.join('.')}: ${issue.message}`)
    .join('; ');
  const id = row.instance_id ?? row.id;
  throw new GymError(
    'VALIDATION_FAILED',
    `row ${position + 1}${id === undefined ? '' : ` (${String(id)})`} is not a valid ${kind.name} task: ${text}`,
    { details: { row: position + 1, issues } },
  );
}

/**
 * The text the agent is asked: the row's problem statement, instruction or question, else (a NeMo
 * Gym row) the system and user text of `responses_create_params.input`.
 */
export function rowInstruction(row: TaskRow): string {
  const text = row.problem_statement ?? row.instruction ?? row.question;
  if (typeof text === 'string' && text.trim() !== '') return text;
  const conversation = rowConversation(row);
  return conversation === undefined ? '' : promptText(conversation);
}
