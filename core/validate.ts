import type { z } from 'zod';
import { GymError } from './errors.ts';

/**
 * Parses input with a schema, turning zod's issues into one VALIDATION_FAILED error whose
 * message names every bad field, so a user sees "resources.memoryMiB: ..." rather than a stack.
 */
export function parseOrThrow<Schema extends z.ZodType>(
  schema: Schema,
  input: unknown,
  what: string,
): z.output<Schema> {
  const result = schema.safeParse(input);
  if (result.success) return result.data;
  const issues = result.error.issues.map((issue) => ({
    path: issue.path.map(String).join('.') || '(root)',
    message: issue.message,
  }));
  const summary = issues.map((issue) => `${issue.path}: ${issue.message}`).join('; ');
  throw new GymError('VALIDATION_FAILED', `invalid ${what}: ${summary}`, { details: { issues } });
}
