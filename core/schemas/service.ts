/**
 * A sandbox's service: a long-running process started beside the sandbox's keeper (the spec's
 * `entrypoint`, or the image's own ENTRYPOINT and CMD), and a health check with Docker's
 * HEALTHCHECK semantics that gates readiness. Shared by the sandbox spec and, later, each service
 * of a multi-container task.
 */
import { z } from 'zod';
import { ExecArgumentSchema } from './common.ts';

/** Bytes of a service's stdout and of its stderr kept, each: the latest, older ones dropped and counted. */
export const SERVICE_OUTPUT_KEEP_BYTES = 256 * 1024;

/**
 * What runs as the service: `image` for the image's own ENTRYPOINT followed by its CMD (as
 * `docker run` would start it), else an argv (no shell).
 */
export const EntrypointSchema = z.union([z.literal('image'), z.array(ExecArgumentSchema).min(1).max(4096)]);
export type Entrypoint = z.infer<typeof EntrypointSchema>;

/**
 * Docker's HEALTHCHECK, its units in milliseconds: `test` is `["CMD", argv...]`,
 * `["CMD-SHELL", "command"]` (run by `sh -c`), `["NONE"]` (no check), or a string (as
 * CMD-SHELL). A probe that exits 0 within `timeoutMs` passes; anything else fails. Probes run
 * every `intervalMs`, the first one interval after the service starts; during `startPeriodMs`
 * they run every `startIntervalMs` and a failure does not count. The service is healthy at the
 * first pass; unhealthy after `retries` failures in a row that count. Defaults are Docker's.
 */
export const HealthCheckSchema = z
  .object({
    test: z.union([
      z.string().min(1).max(65_536),
      z
        .array(ExecArgumentSchema)
        .min(1)
        .max(4096)
        .refine(
          (test) =>
            (test[0] === 'NONE' && test.length === 1) ||
            (test[0] === 'CMD-SHELL' && test.length === 2) ||
            (test[0] === 'CMD' && test.length >= 2),
          { message: 'a test is ["NONE"], ["CMD-SHELL", command] or ["CMD", program, arguments...]' },
        ),
    ]),
    intervalMs: z.number().int().min(100).max(3_600_000).default(30_000),
    timeoutMs: z.number().int().min(100).max(3_600_000).default(30_000),
    retries: z.number().int().min(1).max(1000).default(3),
    startPeriodMs: z
      .number()
      .int()
      .min(0)
      .max(24 * 3_600_000)
      .default(0),
    startIntervalMs: z.number().int().min(100).max(3_600_000).default(5_000),
  })
  .strict();
export type HealthCheck = z.output<typeof HealthCheckSchema>;

/** The argv a health check's test runs; null for `NONE`. */
export function healthCheckArgv(test: HealthCheck['test']): string[] | null {
  if (typeof test === 'string') return ['sh', '-c', test];
  if (test[0] === 'NONE') return null;
  if (test[0] === 'CMD-SHELL') return ['sh', '-c', test[1] as string];
  return test.slice(1);
}

export const ServiceStateSchema = z.enum(['starting', 'healthy', 'running', 'unhealthy', 'exited']);

/**
 * What the daemon knows of a sandbox's service: `starting` (its health check has not passed yet),
 * `healthy` (it passed), `running` (no health check), `unhealthy`, `exited` (with how).
 */
export const ServiceViewSchema = z.object({
  state: ServiceStateSchema,
  argv: z.array(z.string()),
  startedAt: z.string(),
  /** When it ended; absent while it runs. */
  endedAt: z.string().optional(),
  /** How it ended (the exec's status, `sandbox_gone` when the sandbox went first) and its exit code. */
  exit: z.object({ status: z.string(), exitCode: z.number().int().nullable() }).optional(),
  /** The last health probe's outcome, when there is a health check. */
  health: z
    .object({
      failingStreak: z.number().int(),
      lastExitCode: z.number().int().nullable(),
      lastOutput: z.string(),
    })
    .optional(),
});
export type ServiceView = z.infer<typeof ServiceViewSchema>;

/** The latest output of a service, per stream, and how many bytes before it were dropped. */
export const ServiceOutputSchema = z.object({
  stdout: z.string(),
  stderr: z.string(),
  droppedStdoutBytes: z.number().int(),
  droppedStderrBytes: z.number().int(),
});
export type ServiceOutput = z.infer<typeof ServiceOutputSchema>;

/** Where a declared port is reached through the daemon (`GET /v1/sandboxes/{id}/ports/{port}`). */
export const PortEndpointSchema = z.object({
  port: z.number().int(),
  /** The proxy's path on the daemon; a request to `path + rest` reaches `/rest` of the service. */
  path: z.string(),
  /** Headers every request to the path must carry (the sandbox's port key). */
  headers: z.record(z.string(), z.string()),
});
export type PortEndpoint = z.infer<typeof PortEndpointSchema>;
