/**
 * The phases of one rollout, in the order {@link runRollout} runs them: acquire the agent's
 * sandbox, set it up, open the model, run the agent, collect what it left, verify. Each phase is
 * a function of the rollout's context and what the phases before it produced; none of them writes
 * the rollout line (`rollout-record.ts` does).
 */
import type { GymClient } from '../../client/client.ts';
import { GymError, isGymError } from '../../core/errors.ts';
import type { Sandbox } from '../../core/schemas/api.ts';
import type { Tracing } from '../../core/tracing.ts';
import type { HarnessLimits, HarnessResult, HarnessTask, SandboxHandle } from '../../harnesses/harness.ts';
import { clientSandboxHandle } from '../../harnesses/sandbox-handle.ts';
import type { TaskRow } from '../kinds/kind.ts';
import { promptText, rowConversation, rowSampling } from '../kinds/responses-input.ts';
import type { Verdict } from '../verifiers/verifier.ts';
import { type KeptAgentFile, keepAgentFiles } from './agent-logs.ts';
import type { EvalOptions } from './eval-types.ts';
import { outputPaths } from './files.ts';
import type { ForkSetupRecord, ForkSetups, SandboxRequest } from './fork-setup.ts';
import type { RolloutNetworkRecords } from './network-records.ts';

/** What every phase of one rollout attempt reads. */
export interface RolloutContext {
  options: EvalOptions;
  row: TaskRow;
  limits: HarnessLimits;
  rolloutId: string;
  attempt: number;
  /** The run's warm pools by image (with `--fork-setup`, of the setup sandboxes). */
  pools: ReadonlyMap<string, string>;
  /** The run's shared setups, with `--fork-setup`. */
  forks?: ForkSetups;
  /** The run's client with the rollout's execs watched for sandbox loss (`sandbox-loss.ts`). */
  client: GymClient;
  /** The agent sandbox's image, or null for a kind that gives its harness none. */
  image: string | null;
  tracing: Tracing;
  /** The rollout's egress records (`network-records.ts`), for a kind whose phases have policies. */
  network: RolloutNetworkRecords;
}

/** The model endpoint the harness is given. */
export interface ModelEndpoint {
  baseUrl: string;
  basePath: string;
  apiKey: string;
  model: string;
}

/** What the agent left that the rollout line keeps. */
export interface AgentRecords {
  modelCalls: unknown[];
  /** Why the model calls could not be read back, when they could not: never a silent empty list. */
  modelCallsError?: string;
  agentLogs: KeptAgentFile[];
  agentLogsError?: string;
}

const noSandbox = () =>
  Promise.reject(new GymError('CAPABILITY_UNSUPPORTED', 'this environment gives its harness no sandbox'));
const NO_SANDBOX: SandboxHandle = { id: 'none', exec: noSandbox, writeFile: noSandbox, readFile: noSandbox };

/** Errors that are a mistake in the run's set-up: every rollout would fail alike. */
const CONFIGURATION_ERRORS = new Set<string>([
  'VALIDATION_FAILED',
  'IMAGE_NOT_FOUND',
  'UNAUTHORIZED',
  'PROVIDER_NOT_FOUND',
  'POOL_NOT_FOUND',
  // The daemon's configuration refuses what the run asks (a sandbox setting, a task's network
  // that the configuration this run read allowed): every such rollout would fail alike, and
  // retrying it as an outage would only loop.
  'FORBIDDEN_BY_CONFIG',
]);

/** The agent's sandbox: what it was made from, and, from a shared setup, where it came from. */
export interface AcquiredSandbox {
  sandbox: Sandbox;
  /** Set when the sandbox is a child of its group's shared setup (`--fork-setup`). */
  forkSetup?: ForkSetupRecord;
}

/** How the row's agent sandbox is made: its spec, and its image's pool when the run has one; null without an image. */
export function sandboxRequest(
  options: EvalOptions,
  pools: ReadonlyMap<string, string>,
  row: TaskRow,
): SandboxRequest | null {
  const { environment } = options;
  const kind = environment.implementation;
  const image = kind.image(row, environment);
  if (image === null) return null;
  const network = phaseNetwork(options, row);
  const spec = {
    ...(environment.sandbox as object),
    ...kind.sandbox?.(row, environment),
    ...(network === undefined ? {} : { network: network.environment }),
    image,
    labels: { role: 'agent' },
  };
  // A pool's members have the image's spec alone: a task with services of its own makes its group.
  const pool = 'services' in spec ? undefined : pools.get(image);
  return pool === undefined ? { spec } : { spec, pool };
}

/** The kind's policy per phase, when its task opens any network (else none is set or switched). */
function phaseNetwork(options: EvalOptions, row: TaskRow) {
  const network = options.environment.implementation.network?.(row, options.environment);
  if (network === undefined || Object.values(network).every((policy) => policy.mode === 'none'))
    return undefined;
  return network;
}

/**
 * Acquire: the agent's sandbox, from the image's pool when the run has one, or, with
 * `--fork-setup` and a row with a setup command, the row's child of its group's shared setup. A
 * kind without an image (questions) gets none. Returns the sandbox, if any.
 */
export async function acquireSandbox(context: RolloutContext): Promise<AcquiredSandbox | undefined> {
  const { client, options, pools, row } = context;
  const request = sandboxRequest(options, pools, row);
  if (request === null) return undefined;
  const acquired: AcquiredSandbox =
    context.forks?.shares(row) === true
      ? await context.forks
          .acquire(row)
          .then((forked) => ({ sandbox: forked.sandbox, forkSetup: forked.record }))
      : {
          sandbox: await client.createSandbox(
            request.pool === undefined ? request.spec : { pool: request.pool, labels: { role: 'agent' } },
          ),
        };
  const network = phaseNetwork(options, row);
  if (network !== undefined) {
    // A pool's sandbox keeps its pool's engine mode, and a fork's child no policy of its parent's:
    // either gets the task's environment policy by a switch.
    if (request.pool !== undefined || acquired.forkSetup !== undefined)
      await client.setNetwork(acquired.sandbox.id, network.environment);
    context.network.mark(acquired.sandbox.id, 'environment');
  }
  return acquired;
}

/**
 * The agent phase's network, switched to before the harness runs: what the set-up (an image's
 * ENTRYPOINT) opened under the environment phase's policy is cut.
 */
export async function enterAgentNetwork(
  context: RolloutContext,
  sandboxId: string | undefined,
): Promise<void> {
  const network = phaseNetwork(context.options, context.row);
  if (network === undefined || sandboxId === undefined) return;
  await context.client.setNetwork(sandboxId, network.agent);
  context.network.mark(sandboxId, 'agent');
}

/** The harness's handle on the sandbox; without one, a handle that refuses any use. */
export function sandboxHandle(context: RolloutContext, sandboxId: string | undefined): SandboxHandle {
  return sandboxId === undefined ? NO_SANDBOX : clientSandboxHandle(context.client, sandboxId);
}

/**
 * The row's own setup command (the dataset's: what `--fork-setup` runs once per task, in the
 * group's setup sandbox). A failed setup is an infrastructure fault.
 */
export async function runRowSetup(row: TaskRow, sandbox: SandboxHandle): Promise<void> {
  if (typeof row.setup !== 'string' || row.setup === '') return;
  const setup = await sandbox.exec({ command: row.setup, cwd: '/', timeoutMs: 120_000 });
  if (setup.status !== 'ok' || setup.exitCode !== 0)
    throw new Error(
      `the task's setup failed (${setup.status}, exit ${setup.exitCode}): ${setup.stderr.slice(-500)}`,
    );
}

/**
 * Setup: the row's own setup command, then the kind's start. A sandbox of a shared setup
 * (`fromSharedSetup`) has the command's files already and runs only the kind's start, which
 * starts processes (a Harbor image's ENTRYPOINT) that a files-only fork does not carry.
 * A failed setup is an infrastructure fault.
 */
export async function setupSandbox(
  context: RolloutContext,
  sandbox: SandboxHandle,
  fromSharedSetup = false,
): Promise<void> {
  const { row, options } = context;
  if (!fromSharedSetup) await runRowSetup(row, sandbox);
  await options.environment.implementation.startSandbox?.({ row, sandbox, environment: options.environment });
}

/**
 * Model: the rollout opened at the gateway, for a harness that calls a model, bound to the
 * agent's sandbox (`sandboxId`): a call with its key from any other sandbox is refused.
 */
export async function openModel(context: RolloutContext, sandboxId?: string): Promise<ModelEndpoint> {
  const { options, client, rolloutId } = context;
  if (!options.harness.needsModel) return { baseUrl: '', basePath: '', apiKey: '', model: options.modelName };
  const rollout = await client.openRollout({
    rolloutId,
    ...(sandboxId === undefined ? {} : { sandboxId }),
    ...(options.upstream === undefined
      ? {}
      : {
          upstream:
            options.tokenIds === true ? { ...options.upstream, requestTokenIds: true } : options.upstream,
        }),
  });
  return {
    baseUrl: `${client.url}${rollout.basePath}`,
    basePath: rollout.basePath,
    apiKey: rollout.key,
    model: options.modelName,
  };
}

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

/** Agent: the harness run on the task, in the sandbox, against the model. */
export async function runAgent(
  context: RolloutContext,
  sandbox: SandboxHandle,
  model: ModelEndpoint,
): Promise<HarnessResult> {
  const { options, row } = context;
  const { harness, environment } = options;
  const kind = environment.implementation;
  return harness.run({
    sandbox,
    task: withConversation(
      kind.task(row, environment, { usesGoldPatch: harness.usesGoldPatch === true }),
      row,
    ),
    model,
    limits: { ...context.limits, ...kind.limits?.(row) },
    logger: options.logger,
  });
}

/**
 * Collect: the agent's own files, each cut to size, beside the rollouts file (a host that cannot
 * write them loses them, not the rollout), and the gateway's records of its model calls.
 */
export async function collectAgentRecords(
  context: RolloutContext,
  harnessResult: HarnessResult,
): Promise<AgentRecords> {
  const { options, client, rolloutId } = context;
  const records: AgentRecords = { modelCalls: [], agentLogs: [] };
  records.agentLogs = await keepAgentFiles(
    outputPaths(options.output).agentLogs,
    rolloutId,
    harnessResult.agentFiles ?? [],
  ).catch((error: unknown) => {
    records.agentLogsError = String(error);
    return [];
  });
  if (options.harness.needsModel) {
    records.modelCalls = await client.rolloutRecords(rolloutId).catch((error: unknown) => {
      records.modelCallsError = isGymError(error) ? `${error.code}: ${error.message}` : String(error);
      return [];
    });
  }
  return records;
}

/**
 * Verify: the kind's verifier on the final state, unless the harness already ended the rollout
 * (an infrastructure fault, a lost sandbox, an agent error), which no verifier can turn into a
 * reward.
 */
export async function verifyRollout(
  context: RolloutContext,
  sandbox: SandboxHandle,
  harnessResult: HarnessResult,
  releaseSandbox: () => Promise<void>,
): Promise<Verdict> {
  const { options, row, client } = context;
  if (harnessResult.outcome === 'sandbox_gone' || harnessResult.outcome === 'infra_error')
    return {
      outcome: 'infra_error',
      reward: 0,
      details: {
        reason:
          harnessResult.outcome === 'sandbox_gone'
            ? 'the agent sandbox went away'
            : `the harness hit an infrastructure fault: ${harnessResult.message ?? 'unknown'}`,
      },
    };
  if (harnessResult.outcome === 'agent_error')
    return {
      outcome: 'agent_error',
      reward: 0,
      details: { reason: harnessResult.message ?? 'agent error' },
    };
  return options.environment.implementation.verify({
    client,
    environment: options.environment,
    row,
    sandbox,
    harnessResult,
    releaseSandbox,
    logger: options.logger,
    network: {
      mark: (sandboxId, phase) => context.network.mark(sandboxId, phase),
      read: (sandboxId, role) => context.network.read(sandboxId, role),
    },
  });
}

/**
 * The verdict of a rollout a phase threw out of: an infrastructure fault, retried. A mistake in
 * the run's set-up (no such image, no model upstream) fails every rollout alike, so it is thrown
 * on: the run stops and says so, rather than retrying it as an outage.
 */
export function faultVerdict(context: RolloutContext, error: unknown): Verdict {
  const { image, row } = context;
  const kind = context.options.environment.implementation;
  if (isGymError(error, 'IMAGE_NOT_FOUND') && image !== null && kind.describeMissingImage !== undefined) {
    // Where the provider's image sources looked (a tarball folder, a mirror), when it has any.
    const searched = error.details?.imageSources;
    throw new GymError(
      'IMAGE_NOT_FOUND',
      `${kind.describeMissingImage(image, row)}${typeof searched === 'string' ? ` (image sources: ${searched})` : ''}`,
      { details: { image }, cause: error },
    );
  }
  if (isGymError(error) && CONFIGURATION_ERRORS.has(error.code)) throw error;
  // The task's own fault, not an outage: its service (or a companion) exited or never became
  // healthy. Not a reward, and not retried.
  if (isGymError(error, 'SERVICE_UNHEALTHY'))
    return { outcome: 'task_error', reward: 0, details: { reason: error.message } };
  return {
    outcome: 'infra_error',
    reward: 0,
    details: { reason: isGymError(error) ? `${error.code}: ${error.message}` : String(error) },
  };
}
