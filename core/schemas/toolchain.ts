/**
 * The toolchain check (`POST /v1/sandboxes/{id}/toolchain-check`): before a verifier runs in a
 * sandbox an agent had, which of the files the verifier's interpreters and tools are made of, or
 * read before any test code, differ from the sandbox's image. Seen from outside the sandbox (the
 * engine's own view of its filesystem), never by running anything in it.
 */
import { z } from 'zod';

/** A program name (`pytest`) or an absolute path (`/opt/venv/bin/python`). */
const ToolSchema = z
  .string()
  .min(1)
  .max(4096)
  .regex(/^(\/[^\0]*|[^/\0]+)$/, 'a program name or an absolute path');

export const ToolchainCheckRequestSchema = z
  .object({
    /**
     * Programs the verifier will run beyond those always checked (`sh`, `bash`, `env`, `python3`,
     * `python`, `pytest`, `uv`), by name (looked up on the sandbox's PATH in the image) or path.
     */
    tools: z.array(ToolSchema).max(64).default([]),
    /**
     * Folders the verifier's python runs in (its working folder): `python -m` and `-c` import from
     * there first, so a module added there under a name python finds in the image (pytest, a
     * standard module) replaces the image's.
     */
    workdirs: z
      .array(
        z
          .string()
          .min(1)
          .max(4096)
          .regex(/^\/[^\0]*$/, 'an absolute path'),
      )
      .max(8)
      .default([]),
  })
  .strict();
export type ToolchainCheckRequest = z.output<typeof ToolchainCheckRequestSchema>;
export type ToolchainCheckRequestInput = z.input<typeof ToolchainCheckRequestSchema>;

/** One path that makes the verifier run something other than the image's own. */
export const ToolchainFindingSchema = z.object({
  /** The path as the sandbox sees it. */
  path: z.string(),
  /** How it differs from the image. */
  change: z.enum(['added', 'modified', 'removed']),
  /** Why it matters to the verifier, for the rollout's reason. */
  why: z.string(),
});
export type ToolchainFinding = z.infer<typeof ToolchainFindingSchema>;

export const ToolchainCheckResultSchema = z.object({
  /** Empty when every checked file is the image's own. */
  tampered: z.array(ToolchainFindingSchema),
  /** How many paths the engine listed as changed from the image (for logs and cost). */
  changedPaths: z.number().int().nonnegative(),
  /** How long the check took in the provider. */
  durationMs: z.number().nonnegative(),
});
export type ToolchainCheckResult = z.infer<typeof ToolchainCheckResultSchema>;
