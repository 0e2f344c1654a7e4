/**
 * One rollout attempt, phase by phase (`rollout-phases.ts`): acquire the agent's sandbox, set it
 * up, open the model, run the agent, collect what it left, verify; then release the sandbox and
 * the model whatever happened, and record the line.
 */
import type { HarnessLimits, HarnessResult } from '../../harnesses/harness.ts';
import type { TaskRow } from '../kinds/kind.ts';
import type { Verdict } from '../verifiers/verifier.ts';
import type { EvalOptions, Timings } from './eval-types.ts';
import {
  type AgentRecords,
  acquireSandbox,
  collectAgentRecords,
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

export async function runRollout(
  pools: ReadonlyMap<string, string>,
  options: EvalOptions,
  row: TaskRow,
  limits: HarnessLimits,
  rolloutId: string,
  attempt: number,
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
    client,
    image: options.environment.implementation.image(row, options.environment),
  };
  const timings: Timings = { sandboxMs: 0, agentMs: 0, verifyMs: 0, totalMs: 0 };
  const started = Date.now();
  let sandboxId: string | undefined;
  let harnessResult: HarnessResult | undefined;
  let verdict: Verdict;
  let records: AgentRecords = { modelCalls: [], agentLogs: [] };
  const releaseSandbox = async () => {
    const id = sandboxId;
    sandboxId = undefined;
    if (id !== undefined) await client.destroySandbox(id).catch(() => {});
  };
  try {
    sandboxId = await acquireSandbox(context);
    const sandbox = sandboxHandle(context, sandboxId);
    await setupSandbox(context, sandbox);
    timings.sandboxMs = Date.now() - started;
    watch.start();
    const model = await openModel(context);
    const agentStarted = Date.now();
    harnessResult = await runAgent(context, sandbox, model);
    timings.agentMs = Date.now() - agentStarted;
    records = await collectAgentRecords(context, harnessResult);
    const verifyStarted = Date.now();
    verdict = await verifyRollout(context, sandbox, harnessResult, releaseSandbox);
    timings.verifyMs = Date.now() - verifyStarted;
  } catch (error) {
    verdict = faultVerdict(context, error);
  } finally {
    await releaseSandbox();
    if (options.harness.needsModel) await client.closeRollout(rolloutId).catch(() => {});
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
  timings.totalMs = Date.now() - started;
  const end: RolloutEnd = { verdict, harnessResult, records, timings, startedAtMs: started };
  return rolloutLine(context, end);
}
