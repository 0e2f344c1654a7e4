/**
 * Recomputes rewards from stored rollouts without running any agent: SWE rollouts are graded
 * again from their stored patch (in a fresh sandbox), question rollouts from their stored answer.
 * Script rollouts cannot be (their final state is gone): they keep their reward, marked so.
 */
import type { GymClient } from '../../client/client.ts';
import type { LoadedEnvironment } from '../environment.ts';
import { verifyExact } from '../verifiers/exact.ts';
import { sweTaskFromRow, verifySwe } from '../verifiers/swe.ts';
import type { Verdict } from '../verifiers/verifier.ts';

export async function reverifyRollout(
  client: GymClient,
  environment: LoadedEnvironment,
  row: Record<string, unknown>,
): Promise<Record<string, unknown>> {
  const verifier = (row.verifier ?? {}) as Record<string, unknown>;
  const response = (row.response ?? {}) as Record<string, unknown>;
  let verdict: Verdict | null = null;
  if (environment.kind === 'swe' && typeof verifier.modelPatch === 'string') {
    verdict = await verifySwe(client, sweTaskFromRow(row), verifier.modelPatch);
    verdict.details.modelPatch = verifier.modelPatch;
  } else if (environment.kind === 'exact') {
    verdict = verifyExact(
      typeof response.submission === 'string' ? response.submission : null,
      String(row.expected_answer ?? ''),
    );
  }
  if (verdict === null) return { ...row, reverified: false };
  return {
    ...row,
    reward: verdict.reward,
    outcome: verdict.outcome,
    verifier: verdict.details,
    reverified: true,
    previous_reward: row.reward,
  };
}
