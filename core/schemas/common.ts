import { z } from 'zod';

/** The longest name of one file or directory (Linux NAME_MAX). */
export const NAME_MAX_BYTES = 255;

/** An absolute POSIX path with no NUL byte. Paths inside sandboxes are always absolute. */
export const AbsolutePathSchema = z
  .string()
  .min(1)
  .max(4096)
  .refine((path) => path.startsWith('/'), { message: 'must be an absolute path (start with /)' })
  .refine((path) => !path.includes('\0'), { message: 'must not contain a NUL byte' })
  // The engine answers a longer name with a bare 500; no file system here holds one.
  .refine((path) => path.split('/').every((name) => Buffer.byteLength(name) <= NAME_MAX_BYTES), {
    message: `must not have a name longer than ${NAME_MAX_BYTES} bytes`,
  });

/** Environment variable names as POSIX shells accept them. */
export const EnvNameSchema = z
  .string()
  .regex(/^[A-Za-z_][A-Za-z0-9_]*$/, { message: 'must be a valid environment variable name' });

/**
 * The kernel's limit on one argument or one `NAME=value` string of an exec (MAX_ARG_STRLEN, 32
 * pages), counted in bytes with its terminating NUL. A longer one makes every exec fail with
 * E2BIG, which looks like a dead sandbox: so it is refused at the door.
 */
export const MAX_ARG_BYTES = 128 * 1024;
/** All of an env's `NAME=value` strings together: well under the kernel's total for argv + env (2 MiB by default). */
export const MAX_ENV_TOTAL_BYTES = 256 * 1024;
/** Variables in one env: far more than any real program needs. */
export const MAX_ENV_ENTRIES = 1024;

/** Bytes an exec spends on a string: its UTF-8 bytes and a NUL. */
export function argBytes(value: string): number {
  return Buffer.byteLength(value) + 1;
}

/** One argument of an exec: no NUL byte, and under the kernel's per-argument limit. */
export const ExecArgumentSchema = z
  .string()
  .refine((value) => !value.includes('\0'), { message: 'must not contain a NUL byte' })
  .refine((value) => value.length < MAX_ARG_BYTES && argBytes(value) <= MAX_ARG_BYTES, {
    message: `must be at most ${MAX_ARG_BYTES} bytes (the kernel's limit on one argument)`,
  });

/**
 * Environment variables, bounded so that every exec of the sandbox can start: each `NAME=value`
 * within {@link MAX_ARG_BYTES}, all together within {@link MAX_ENV_TOTAL_BYTES}, at most
 * {@link MAX_ENV_ENTRIES} of them.
 */
export const EnvSchema = z
  .record(
    EnvNameSchema.max(256),
    z.string().refine((value) => !value.includes('\0'), { message: 'must not contain a NUL byte' }),
  )
  .superRefine((env, context) => {
    const entries = Object.entries(env);
    if (entries.length > MAX_ENV_ENTRIES) {
      context.addIssue({
        code: 'custom',
        message: `must hold at most ${MAX_ENV_ENTRIES} variables, not ${entries.length}`,
      });
      return;
    }
    let totalBytes = 0;
    for (const [name, value] of entries) {
      // A cheap length test first: a huge value is refused without encoding it.
      const bytes = value.length >= MAX_ARG_BYTES ? Number.POSITIVE_INFINITY : argBytes(`${name}=${value}`);
      if (bytes > MAX_ARG_BYTES) {
        context.addIssue({
          code: 'custom',
          path: [name],
          message: `NAME=value must be at most ${MAX_ARG_BYTES} bytes (the kernel's limit on one variable); ${value.length} characters given`,
        });
      }
      totalBytes += bytes;
    }
    if (Number.isFinite(totalBytes) && totalBytes > MAX_ENV_TOTAL_BYTES) {
      context.addIssue({
        code: 'custom',
        message: `all variables together must be at most ${MAX_ENV_TOTAL_BYTES} bytes, not ${totalBytes}`,
      });
    }
  });

/**
 * User label keys: lower-case, short, and safe as a suffix of a Docker label or a Kubernetes
 * label name on every provider.
 */
export const LabelKeySchema = z.string().regex(/^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$/, {
  message: 'label keys are 1-63 characters of a-z, 0-9, ".", "_" or "-", starting and ending alphanumeric',
});

/**
 * One label value, as the strictest backend stores it (a Kubernetes label value): at most 63
 * characters of letters, digits, ".", "_" or "-", starting and ending with a letter or digit, or
 * empty. Values are identities to filter by (a task, a role); longer facts belong elsewhere.
 */
export const LABEL_VALUE_PATTERN = /^([A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?)?$/;
export const LabelValueSchema = z.string().regex(LABEL_VALUE_PATTERN, {
  message:
    'label values are at most 63 characters of letters, digits, ".", "_" or "-", starting and ending with a letter or digit (or empty)',
});

/**
 * A label value made from any text (a task id, a name): characters a value cannot hold become
 * "-", and it is cut to 63 characters and trimmed to start and end alphanumeric. Distinct texts
 * may give one value; use it to filter by, not as a key.
 */
export function toLabelValue(text: string): string {
  return text
    .replace(/[^A-Za-z0-9._-]/g, '-')
    .slice(0, 63)
    .replace(/^[^A-Za-z0-9]+|[^A-Za-z0-9]+$/g, '');
}

/** Labels on one sandbox: each is carried on the provider's resource, so they stay few and short. */
export const MAX_LABELS = 64;

export const LabelsSchema = z
  .record(LabelKeySchema, LabelValueSchema)
  .refine((labels) => Object.keys(labels).length <= MAX_LABELS, {
    message: `must hold at most ${MAX_LABELS} labels`,
  });
