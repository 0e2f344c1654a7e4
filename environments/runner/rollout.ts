/**
 * One rollout attempt, phase by phase (`rollout-phases.ts`): acquire the agent's sandbox, set it
 * up, open the model, run the agent, collect what it left, verify; then release the sandbox and
 * the model whatever happened, and record the line.
 */
import type { TraceSpan, Tracing } from '../../core/tracing.ts';
import type { HarnessLimits, HarnessResult } from '../../harnesses/harness.ts';
import type { TaskRow } from '../kinds/kind.ts';
import type { Verdict } from '../verifiers/verifier.ts';
import type { EvalOptions, Timings } from './eval-types.ts';
import { outputPaths } from './files.ts';
import type { ForkSetupRecord, ForkSetups } from './fork-setup.ts';
import { RolloutNetworkRecords } from './network-records.ts';
import { gymFields } from './rollout-line.ts';
import {
  type AgentRecords,
  acquireSandbox,
  collectAgentRecords,
  enterAgentNetwork,
  faultVerdict,
  openModel,
  type RolloutContext,
  runAgent,
  sandboxHandle,
  setupSandbox,
  verifyRollout,
} from './rollout-phases.ts';
import { type RolloutEnd, rolloutLine } from './rollout-record.ts';
import { watchSandboxLoss } from './sandbox-loss.ts';

/**
 * One attempt, traced as `gym.rollout` with a child span per phase (docs/tracing.md). Its
 * attributes are the run's and the row's indices, never what the agent wrote.
 */
export async function runRollout(
  pools: ReadonlyMap<string, string>,
  forks: ForkSetups | undefined,
  options: EvalOptions,
  row: TaskRow,
  limits: HarnessLimits,
  rolloutId: string,
  attempt: number,
  tracing: Tracing,
): Promise<Record<string, unknown>> {
  return tracing.inSpan(
    'gym.rollout',
    {
      'gym.task.index': Number(row._ng_task_index),
      'gym.rollout.index': Number(row._ng_rollout_index),
      'gym.rollout.attempt': attempt,
      'gym.rollout.id': rolloutId,
      'gym.environment': options.environment.name,
      'gym.environment.kind': options.environment.implementation.name,
      'gym.harness': options.harnessName,
      'gym.model': options.modelName,
    },
    async (span) => {
      const line = await runPhases(pools, forks, options, row, limits, rolloutId, attempt, tracing, span);
      const outcome = String(gymFields(line).outcome);
      span.setAttributes({
        'gym.outcome': outcome,
        'gym.reward': typeof line.reward === 'number' ? line.reward : undefined,
      });
      // An infrastructure fault is the span's error; an agent's failure is an ordinary outcome.
      if (outcome === 'infra_error') span.fail('infra_error');
      return line;
    },
  );
}

async function runPhases(
  pools: ReadonlyMap<string, string>,
  forks: ForkSetups | undefined,
  options: EvalOptions,
  row: TaskRow,
  limits: HarnessLimits,
  rolloutId: string,
  attempt: number,
  tracing: Tracing,
  rolloutSpan: TraceSpan,
): Promise<Record<string, unknown>> {
  // Every exec of the rollout goes through this client: a command that destroyed its sandbox
  // makes the rollout the agent's failure, whatever came after (see `sandbox-loss.ts`).
  const watch = watchSandboxLoss(options.client);
  const { client } = watch;
  const context: RolloutContext = {
    options,
    row,
    limits,
    rolloutId,
    attempt,
    pools,
    ...(forks === undefined ? {} : { forks }),
    client,
    image: options.environment.implementation.image(row, options.environment),
    tracing,
    network: new RolloutNetworkRecords(client),
  };
  const phase = <T>(name: string, work: (span: TraceSpan) => Promise<T>) =>
    tracing.inSpan(`gym.rollout.${name}`, {}, work);
  const timings: Timings = { sandboxMs: 0, agentMs: 0, verifyMs: 0, totalMs: 0 };
  const started = Date.now();
  let sandboxId: string | undefined;
  let harnessResult: HarnessResult | undefined;
  let verdict: Verdict;
  let records: AgentRecords = { modelCalls: [], agentLogs: [] };
  let forkSetup: ForkSetupRecord | undefined;
  const releaseSandbox = async () => {
    const id = sandboxId;
    sandboxId = undefined;
    if (id === undefined) return;
    // The daemon keeps a sandbox's egress log only while the sandbox lives.
    await context.network.read(id, 'agent');
    await client.destroySandbox(id).catch(() => {});
  };
  try {
    sandboxId = await phase('acquire', async (span) => {
      const acquired = await acquireSandbox(context);
      forkSetup = acquired?.forkSetup;
      const attributes = {
        'gym.provider': acquired?.sandbox.provider,
        'gym.sandbox.id': acquired?.sandbox.id,
        'gym.fork.snapshot': forkSetup?.lineage.snapshot,
      };
      span.setAttributes({ ...attributes, 'gym.pool': pools.get(context.image ?? '') });
      rolloutSpan.setAttributes(attributes);
      return acquired?.sandbox.id;
    });
    const sandbox = sandboxHandle(context, sandboxId);
    await phase('setup', async () => {
      await setupSandbox(context, sandbox, forkSetup !== undefined);
      await enterAgentNetwork(context, sandboxId);
    });
    timings.sandboxMs = Date.now() - started;
    watch.start();
    // In the rollout's own span, not a phase's: the daemon nests the rollout's model calls
    // under the span that opened it, and they belong to the rollout, not to a finished phase.
    const model = await openModel(context, sandboxId);
    const agentStarted = Date.now();
    harnessResult = await phase('agent', async (span) => {
      const result = await runAgent(context, sandbox, model);
      span.setAttributes({ 'gym.harness.outcome': result.outcome });
      return result;
    });
    timings.agentMs = Date.now() - agentStarted;
    const ran = harnessResult;
    records = await phase('collect', async (span) => {
      const collected = await collectAgentRecords(context, ran);
      span.setAttributes({
        'gym.model_calls': collected.modelCalls.length,
        'gym.agent_logs': collected.agentLogs.length,
      });
      if (collected.modelCallsError !== undefined) span.fail('model_calls_unreadable');
      return collected;
    });
    const verifyStarted = Date.now();
    verdict = await phase('verify', async (span) => {
      const judged = await verifyRollout(context, sandbox, ran, releaseSandbox);
      span.setAttributes({ 'gym.outcome': judged.outcome, 'gym.reward': judged.reward });
      return judged;
    });
    timings.verifyMs = Date.now() - verifyStarted;
  } catch (error) {
    verdict = faultVerdict(context, error);
  } finally {
    await phase('release', async () => {
      await releaseSandbox();
      context.forks?.released(row);
      if (options.harness.needsModel) await client.closeRollout(rolloutId).catch(() => {});
    });
  }
  // The agent's code destroyed a sandbox (its own, or the verifier's through what it left):
  // `agent_error`, reward 0, as for any harness run the agent made fail. Not a reward (the
  // verifier did not judge a final state) and not an infra error, which would be retried and
  // dropped, so that destroying the sandbox would hide any rollout the agent would fail.
  const loss = watch.loss();
  if (loss !== null)
    verdict = {
      outcome: 'agent_error',
      reward: 0,
      details: { reason: `a command of the rollout lost its sandbox: ${loss.reason}`, sandboxLost: loss },
    };
  // A verdict without a reward, or a 0, whose tests were refused a host: the line says which.
  const refused = context.network.refusedIn('verifier');
  if (refused.length > 0 && (verdict.outcome === 'verifier_error' || verdict.outcome === 'reward'))
    verdict = { ...verdict, details: { ...verdict.details, network_refused: refused.slice(0, 10) } };
  const network = await context.network.keep(outputPaths(options.output).networkLogs, rolloutId);
  timings.totalMs = Date.now() - started;
  const end: RolloutEnd = {
    verdict,
    harnessResult,
    records,
    timings,
    startedAtMs: started,
    forkSetup,
    ...(network === undefined ? {} : { network }),
  };
  return rolloutLine(context, end);
}
