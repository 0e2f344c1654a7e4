/**
 * Which built-in environment a file of rows belongs to, for `gym eval run --input FILE` without
 * `--env`: told from the fields every row has, never guessed. Rows that fit none, or fit
 * different ones, are an error asking for `--env`.
 */
import { GymError } from '../core/errors.ts';
import { looksLikeSweBench } from './kinds/swebench/row.ts';

export interface InferredFormat {
  /** The built-in environment to run the rows as. */
  environment: string;
  /** What the rows were taken for, said to the user. */
  format: string;
}

const has = (row: Record<string, unknown>, key: string) => row[key] !== undefined && row[key] !== null;

function nemoGymInput(row: Record<string, unknown>): boolean {
  const params = row.responses_create_params as { input?: unknown } | undefined;
  return typeof params === 'object' && params !== null && params.input !== undefined;
}

/** The format of one row, or null when it fits none. */
export function rowFormat(row: Record<string, unknown>): InferredFormat | null {
  // Rows read from a Harbor task directory (environments/kinds/harbor/task-directory.ts).
  if (has(row, 'task_dir') && typeof row.build === 'boolean' && has(row, 'verifier_timeout_sec'))
    return { environment: 'harbor', format: 'Harbor task directories' };
  if (looksLikeSweBench(row)) {
    // Our own SWE rows carry their image and test command; published SWE-bench rows carry neither.
    if (has(row, 'image') && has(row, 'test_command'))
      return { environment: 'swe-mini', format: 'SWE tasks with image and test command' };
    return { environment: 'swebench', format: 'SWE-bench rows' };
  }
  if (has(row, 'tests') && has(row, 'image') && (has(row, 'instruction') || nemoGymInput(row)))
    return { environment: 'terminal', format: 'terminal tasks (instruction, image, tests)' };
  if (has(row, 'expected_answer') && (has(row, 'question') || has(row, 'instruction') || nemoGymInput(row)))
    return {
      environment: 'mcqa',
      format: nemoGymInput(row) ? 'NeMo Gym question rows' : 'questions with expected answers',
    };
  return null;
}

/** The environment every row fits; an error naming the rows that fit none or another one. */
export function inferEnvironment(
  rows: ReadonlyArray<Record<string, unknown>>,
  source: string,
): InferredFormat {
  if (rows.length === 0) throw new GymError('VALIDATION_FAILED', `${source} holds no rows`);
  const formats = rows.map(rowFormat);
  const unknown = formats.indexOf(null);
  if (unknown !== -1)
    throw new GymError(
      'VALIDATION_FAILED',
      `cannot tell which environment row ${unknown + 1} of ${source} is for (fields: ${Object.keys(rows[unknown]!).slice(0, 12).join(', ')}); give --env NAME (see gym env ls)`,
    );
  const first = formats[0]!;
  const other = formats.findIndex((format) => format!.environment !== first.environment);
  if (other !== -1)
    throw new GymError(
      'VALIDATION_FAILED',
      `${source} mixes formats: row 1 looks like ${first.format}, row ${other + 1} like ${formats[other]!.format}; give --env NAME`,
    );
  return first;
}
