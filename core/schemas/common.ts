import { z } from 'zod';

/** An absolute POSIX path with no NUL byte. Paths inside sandboxes are always absolute. */
export const AbsolutePathSchema = z
  .string()
  .min(1)
  .max(4096)
  .refine((path) => path.startsWith('/'), { message: 'must be an absolute path (start with /)' })
  .refine((path) => !path.includes('\0'), { message: 'must not contain a NUL byte' });

/** Environment variable names as POSIX shells accept them. */
export const EnvNameSchema = z
  .string()
  .regex(/^[A-Za-z_][A-Za-z0-9_]*$/, { message: 'must be a valid environment variable name' });

export const EnvSchema = z.record(
  EnvNameSchema,
  z.string().refine((value) => !value.includes('\0'), { message: 'must not contain a NUL byte' }),
);

/**
 * User label keys: lower-case, short, and safe as a suffix of a Docker label or a Kubernetes
 * label name on every provider.
 */
export const LabelKeySchema = z.string().regex(/^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$/, {
  message: 'label keys are 1-63 characters of a-z, 0-9, ".", "_" or "-", starting and ending alphanumeric',
});

export const LabelsSchema = z.record(LabelKeySchema, z.string().max(253));
