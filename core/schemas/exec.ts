import { z } from 'zod';
import { AbsolutePathSchema, EnvSchema, ExecArgumentSchema } from './common.ts';

/** One minute: most agent actions finish well within it; longer ones should say so. */
export const DEFAULT_EXEC_TIMEOUT_MS = 60_000;
export const MAX_EXEC_TIMEOUT_MS = 24 * 3600 * 1000;
/** 1 MiB per stream: far more than a model can read, little enough to hold thousands at once. */
export const DEFAULT_MAX_OUTPUT_BYTES = 1024 * 1024;
export const MAX_MAX_OUTPUT_BYTES = 64 * 1024 * 1024;

/** Standard input of one exec (characters, UTF-8 or base64): within the exec body limit (96 MiB). */
export const MAX_STDIN_CHARS = 64 * 1024 * 1024;

/** An exec result's `reason`: one sentence, never output (which has its own fields and caps). */
export const MAX_EXEC_REASON_CHARS = 500;

export const SessionNameSchema = z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/, {
  message: 'session names are 1-64 characters of letters, digits, ".", "_" or "-"',
});

export const ExecRequestSchema = z
  .object({
    /** The program and its arguments, run without a shell (preferred). */
    argv: z.array(ExecArgumentSchema).min(1).max(65_536).optional(),
    /** A shell command, run by `sh -c`. */
    command: ExecArgumentSchema.min(1).optional(),
    cwd: AbsolutePathSchema.optional(),
    /** Added to (and overriding) the sandbox's environment for this command only. */
    env: EnvSchema.default({}),
    /** Bytes fed to the command's standard input; it sees end-of-file after them. */
    stdin: z.string().max(MAX_STDIN_CHARS).optional(),
    stdinEncoding: z.enum(['utf8', 'base64']).default('utf8'),
    /** On expiry every process the command started is killed; the sandbox stays usable. */
    timeoutMs: z.number().int().positive().max(MAX_EXEC_TIMEOUT_MS).default(DEFAULT_EXEC_TIMEOUT_MS),
    /** Per stream. Beyond it the head and the tail are kept with a marker between them. */
    maxOutputBytes: z.number().int().min(64).max(MAX_MAX_OUTPUT_BYTES).default(DEFAULT_MAX_OUTPUT_BYTES),
    /** Run through this persistent shell (created on first use) instead of a fresh exec. */
    session: SessionNameSchema.optional(),
    /** Run as this user instead of the sandbox's. */
    user: z.string().min(1).max(256).optional(),
  })
  .strict()
  .refine((request) => (request.argv === undefined) !== (request.command === undefined), {
    message: 'an exec request needs exactly one of argv or command',
  });

export type ExecRequestInput = z.input<typeof ExecRequestSchema>;
export type ExecRequest = z.output<typeof ExecRequestSchema>;

/**
 * - `ok`: the command ran to its end (whatever its exit code).
 * - `timeout`: it ran past `timeoutMs`; all its processes were killed.
 * - `killed`: something other than our timeout killed it (a signal from inside, a lost session).
 * - `oom`: the kernel killed it for exceeding the sandbox's memory limit.
 * - `sandbox_gone`: the sandbox was taken away from outside while the command ran (destroyed,
 *   reaped, its engine or host lost): never the command's doing. A sandbox the command itself
 *   ended is one of the other statuses with `sandboxLost` (see {@link ExecResultSchema}).
 */
export const ExecStatusSchema = z.enum(['ok', 'timeout', 'killed', 'oom', 'sandbox_gone']);
export type ExecStatus = z.infer<typeof ExecStatusSchema>;

export const ExecResultSchema = z.object({
  status: ExecStatusSchema,
  /** The exit code, or null when the command did not exit by itself (timeout, sandbox gone). */
  exitCode: z.number().int().nullable(),
  stdout: z.string(),
  stderr: z.string(),
  stdoutTruncated: z.boolean(),
  stderrTruncated: z.boolean(),
  /** Bytes the command wrote, including any that were dropped by truncation. */
  stdoutBytes: z.number().int().nonnegative(),
  stderrBytes: z.number().int().nonnegative(),
  durationMs: z.number().nonnegative(),
  /**
   * `false` when the request named a session and the provider has none, so the command ran
   * one-shot (it behaves the same, only each command pays for its own exec). Absent otherwise:
   * a request with a session ran in it.
   */
  session: z.literal(false).optional(),
  /**
   * The sandbox did not survive the command, by the command's own doing: it died of its own
   * memory or process use, or the provider had to kill it because the command's processes
   * resisted their kill. `status` says how the command ended (`oom`, `timeout`, `killed`), and
   * `reason` why the sandbox was lost. The daemon forgets the sandbox, as for `sandbox_gone`; an
   * evaluation grades the rollout as the agent's failure, never as an infrastructure fault.
   * Absent when the sandbox lives on (or was taken away from outside: `sandbox_gone`).
   */
  sandboxLost: z.literal(true).optional(),
  /** Why the sandbox was lost (with `sandboxLost`), for people: one short sentence. */
  reason: z.string().max(MAX_EXEC_REASON_CHARS).optional(),
});
export type ExecResult = z.infer<typeof ExecResultSchema>;
