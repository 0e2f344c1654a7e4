/**
 * Recomputes rewards from stored rollouts without running any agent, by the environment kind's
 * `reverify` (SWE rollouts are graded again from their stored patch in a fresh sandbox, question
 * rollouts from their stored answer). A kind that cannot (a script rollout's final state is gone
 * with its sandbox) leaves the reward as it was, marked so.
 */
import type { GymClient } from '../../client/client.ts';
import type { LoadedEnvironment } from '../environment.ts';

export async function reverifyRollout(
  client: GymClient,
  environment: LoadedEnvironment,
  row: Record<string, unknown>,
): Promise<Record<string, unknown>> {
  const verdict = (await environment.implementation.reverify?.(client, environment, row)) ?? null;
  if (verdict === null) return { ...row, reverified: false };
  // Grading that could not finish (an outage, a verifier timeout) judged nothing: the stored
  // reward stands, and the row says why it was not reverified.
  if (verdict.outcome === 'infra_error' || verdict.outcome === 'verifier_timeout')
    return { ...row, reverified: false, reverify_failure: { outcome: verdict.outcome, ...verdict.details } };
  return {
    ...row,
    reward: verdict.reward,
    outcome: verdict.outcome,
    verifier: verdict.details,
    reverified: true,
    previous_reward: row.reward,
  };
}
