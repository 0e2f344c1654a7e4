/** Row fields that several kinds check the same way. */
import { z } from 'zod';
import { rowConversation } from './responses-input.ts';

export const nonEmpty = z.string().trim().min(1, 'must be a non-empty string');

/** A list of test names: an array, or a JSON-encoded array as SWE-bench publishes it. */
export const testNames = z.union([
  z.array(z.string()),
  z.string().refine((text) => {
    if (text.trim() === '') return true;
    try {
      const parsed: unknown = JSON.parse(text);
      return Array.isArray(parsed) && parsed.every((name) => typeof name === 'string');
    } catch {
      return false;
    }
  }, 'must be a list of test names or a JSON-encoded list'),
]);

/** A path inside the environment's folder: relative, no `..` step out of it. */
export const folderPath = nonEmpty.refine(
  (path) => !path.startsWith('/') && !path.split('/').includes('..'),
  'must be a path inside the environment folder (relative, no "..")',
);

/** An absolute path in the sandbox. */
export const sandboxPath = nonEmpty.refine((path) => path.startsWith('/'), 'must be an absolute path');

/** The prompt: at least one of the fields a kind reads it from (NeMo Gym's `responses_create_params.input` too). */
export function hasPrompt(row: Record<string, unknown>): boolean {
  return (
    ['problem_statement', 'instruction', 'question'].some(
      (field) => typeof row[field] === 'string' && (row[field] as string).trim() !== '',
    ) || rowConversation(row) !== undefined
  );
}
