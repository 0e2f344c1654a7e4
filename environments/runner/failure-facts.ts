/**
 * The failure facts of a rollout line, as NeMo Gym 0.7's verify response names them:
 * `mask_sample` (the reward is not a valid measurement of the policy: the infrastructure, the
 * verifier or the token capture failed, so a trainer leaves the sample out instead of learning
 * from a false 0) and `failure_reason` (why, in words; null when nothing failed). On every line
 * `gym eval run` and `gym serve` write, whatever the outcome.
 *
 * An agent's own failure (its harness broke, it destroyed its sandbox) is a valid 0: its reason
 * is named but the sample is not masked, as NeMo Gym keeps `mask_sample` false for a sample
 * "that degraded but was still measured validly".
 */
import type { HarnessResult } from '../../harnesses/harness.ts';
import type { RolloutOutcome, Verdict } from '../verifiers/verifier.ts';
import { MASK_SAMPLE_KEY, type TrainingCapture } from './training-response.ts';

/** The line's key that says why, as NeMo Gym names it. */
export const FAILURE_REASON_KEY = 'failure_reason';

/** NeMo Gym's bound on an episode's `failure_reason` (`EpisodeFailure.failure_reason`). */
export const MAX_FAILURE_REASON_CHARS = 2000;

/** The outcomes whose reward measures nothing of the policy. */
const MASKED_OUTCOMES: ReadonlySet<RolloutOutcome> = new Set([
  'infra_error',
  'verifier_timeout',
  'verifier_error',
  'task_error',
]);

export interface FailureFacts {
  [MASK_SAMPLE_KEY]: boolean;
  [FAILURE_REASON_KEY]: string | null;
}

function verdictReason(verdict: Verdict, harnessResult: HarnessResult | undefined): string | null {
  if (verdict.outcome === 'reward') return null;
  const given = verdict.details.reason;
  const reason =
    typeof given === 'string' && given !== '' ? given : (harnessResult?.message ?? 'no reason was recorded');
  return `${verdict.outcome}: ${reason}`;
}

/** The facts of one attempt's line, from its verdict and, when the run asked for ids, its capture. */
export function failureFacts(
  verdict: Verdict,
  harnessResult: HarnessResult | undefined,
  capture: TrainingCapture | undefined,
): FailureFacts {
  const reasons: string[] = [];
  const fromVerdict = verdictReason(verdict, harnessResult);
  if (fromVerdict !== null) reasons.push(fromVerdict);
  if (capture?.maskSample === true)
    reasons.push(`token capture: ${capture.metrics.mask_reasons.join('; ') || 'masked'}`);
  const reason = reasons.join('; ');
  return {
    [MASK_SAMPLE_KEY]: MASKED_OUTCOMES.has(verdict.outcome) || capture?.maskSample === true,
    [FAILURE_REASON_KEY]:
      reason === ''
        ? null
        : reason.length > MAX_FAILURE_REASON_CHARS
          ? `${reason.slice(0, MAX_FAILURE_REASON_CHARS - 1)}…`
          : reason,
  };
}
