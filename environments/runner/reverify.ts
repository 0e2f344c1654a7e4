/**
 * Recomputes rewards from stored rollouts without running any agent, by the environment kind's
 * `reverify` (SWE rollouts are graded again from their stored patch in a fresh sandbox, question
 * rollouts from their stored answer). A kind that cannot (a script rollout's final state is gone
 * with its sandbox) leaves the reward as it was, marked so.
 *
 * Lines may be ours or NeMo Gym's. As NeMo Gym's own reverify does, a line is graded on the row it
 * was run from with the line's `response` (`joinInputs`): a NeMo Gym line keeps only some of the
 * row's fields (its example mcqa rollouts drop `options` and `template_metadata`).
 */
import type { GymClient } from '../../client/client.ts';
import type { LoadedEnvironment } from '../environment.ts';
import { promptText, rowConversation } from '../kinds/responses-input.ts';
import { rolloutKey } from './files.ts';
import { GYM_FIELDS, gymFields } from './rollout-line.ts';

type Line = Record<string, unknown>;

const hasIndices = (line: Line) =>
  typeof line._ng_task_index === 'number' && typeof line._ng_rollout_index === 'number';

const promptKey = (line: Line) => {
  const conversation = rowConversation(line);
  return conversation === undefined ? undefined : promptText(conversation);
};

/**
 * The input row of each stored line, or undefined: the input with the same task and rollout
 * index (materialized inputs), else the one with the same prompt (task rows, or lines without
 * indices, as NeMo Gym's older files are).
 */
export function joinInputs(lines: readonly Line[], inputs: readonly Line[]): Array<Line | undefined> {
  const byKey = new Map(inputs.filter(hasIndices).map((input) => [rolloutKey(input), input]));
  const byPrompt = new Map<string, Line>();
  for (const input of inputs) {
    const key = promptKey(input);
    if (key !== undefined && !byPrompt.has(key)) byPrompt.set(key, input);
  }
  return lines.map((line) => {
    const keyed = hasIndices(line) ? byKey.get(rolloutKey(line)) : undefined;
    if (keyed !== undefined) return keyed;
    const key = promptKey(line);
    return key === undefined ? undefined : byPrompt.get(key);
  });
}

export async function reverifyRollout(
  client: GymClient,
  environment: LoadedEnvironment,
  row: Line,
  input?: Line,
): Promise<Line> {
  // NeMo Gym's verify payload: the input row with the stored response.
  const payload = input === undefined ? row : { ...row, ...input, response: row.response };
  const ours = gymFields(row);
  const verdict = (await environment.implementation.reverify?.(client, environment, payload)) ?? null;
  if (verdict === null) return { ...row, [GYM_FIELDS]: { ...ours, reverified: false } };
  // Grading that could not finish (an outage, a verifier timeout) judged nothing: the stored
  // reward stands, and the line says why it was not reverified.
  if (verdict.outcome === 'infra_error' || verdict.outcome === 'verifier_timeout')
    return {
      ...row,
      [GYM_FIELDS]: {
        ...ours,
        reverified: false,
        reverify_failure: { outcome: verdict.outcome, ...verdict.details },
      },
    };
  return {
    ...row,
    ...verdict.fields,
    reward: verdict.reward,
    [GYM_FIELDS]: {
      ...ours,
      outcome: verdict.outcome,
      verifier: verdict.details,
      reverified: true,
      previous_reward: row.reward,
    },
  };
}
