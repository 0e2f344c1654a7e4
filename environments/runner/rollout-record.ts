/**
 * Record: one rollout attempt's line, NeMo Gym's keys at the top level with its types
 * (`rollout-line.ts`) and ours in one object beside them.
 */
import type { HarnessResult } from '../../harnesses/harness.ts';
import type { Verdict } from '../verifiers/verifier.ts';
import type { Timings } from './eval-types.ts';
import { failureFacts } from './failure-facts.ts';
import type { ForkSetupRecord } from './fork-setup.ts';
import type { NetworkSummary } from './network-records.ts';
import { buildResponse, GYM_FIELDS, type GymRolloutFields } from './rollout-line.ts';
import type { AgentRecords, RolloutContext } from './rollout-phases.ts';
import { buildTrainingCapture, TOKEN_CAPTURE_KEY } from './training-response.ts';
import { configuredPrices, sumUsage } from './usage.ts';

/** What the phases of one attempt produced, however far it got. */
export interface RolloutEnd {
  verdict: Verdict;
  harnessResult: HarnessResult | undefined;
  records: AgentRecords;
  timings: Timings;
  /** When the attempt started (ms since the epoch). */
  startedAtMs: number;
  /** Where its sandbox came from, when it was a child of its group's shared setup (`--fork-setup`). */
  forkSetup?: ForkSetupRecord | undefined;
  /** The egress summary, when the rollout's sandboxes had network policies (`network-records.ts`). */
  network?: NetworkSummary;
}

export function rolloutLine(context: RolloutContext, end: RolloutEnd): Record<string, unknown> {
  const { options, row, rolloutId, attempt, image } = context;
  const { harness, environment } = options;
  const kind = environment.implementation;
  const { verdict, harnessResult, records, timings } = end;
  const { modelCalls, modelCallsError, agentLogs, agentLogsError } = records;
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
    // A shared setup's lineage beside the image, inside our object: NeMo Gym's keys stay as they are.
    sandbox: { image, ...end.forkSetup },
    ...(end.network === undefined ? {} : { network: end.network }),
    ...(kind.describeRollout === undefined ? {} : { task: kind.describeRollout(row, environment, verdict) }),
  };
  const response = buildResponse({
    rolloutId,
    startedAtMs: end.startedAtMs,
    modelName: options.modelName,
    params: row.responses_create_params,
    harnessResult,
    modelCalls,
    usage,
  });
  // As NeMo Gym does with token capture on: the rebuilt output replaces the response's, the rest stays.
  const capture = options.tokenIds === true ? buildTrainingCapture(modelCalls, modelCallsError) : undefined;
  if (capture?.output !== undefined) response.output = capture.output;
  return {
    ...row,
    _ng_attempt_index: attempt,
    _ng_rollout_id: rolloutId,
    // Before `response` and `reward`, so a verifier's field can never stand in for either.
    ...verdict.fields,
    response,
    reward: verdict.reward,
    // After the row's and the verifier's fields: neither can say a sample is sound.
    ...(capture === undefined ? {} : { [TOKEN_CAPTURE_KEY]: capture.metrics }),
    ...failureFacts(verdict, harnessResult, capture),
    [GYM_FIELDS]: gym,
  };
}
