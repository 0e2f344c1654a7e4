import { z } from 'zod';
import { SandboxSpecSchema } from './sandbox.ts';

/** A pool's name is a label value on each member, so it ends alphanumeric as every backend needs. */
export const PoolNameSchema = z.string().regex(/^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/, {
  message: 'pool names are 1-63 characters of a-z, 0-9 or "-", starting and ending alphanumeric',
});

/** A pool as a user defines it (PUT /v1/pools/{name}, or `pools:` in the config). */
export const PoolDefinitionSchema = z
  .object({
    /** The spec every member is created from. */
    spec: SandboxSpecSchema,
    /** Ready sandboxes the pool keeps waiting; refilled in the background. */
    minIdle: z.number().int().nonnegative().default(0),
    /** Idle sandboxes above this are not created (a pool never grows its idle set past it). */
    maxIdle: z.number().int().nonnegative().optional(),
    /** Members (idle + leased + creating) the pool's own refill never exceeds. */
    maxTotal: z.number().int().positive().optional(),
    /** An idle sandbox older than this is destroyed and replaced (it may have gone stale). */
    idleTtlSeconds: z.number().int().positive().default(3600),
    /** Refill creates running at once for this pool. */
    refillConcurrency: z.number().int().positive().max(64).default(4),
  })
  .strict()
  .transform((definition) => ({
    ...definition,
    maxIdle: definition.maxIdle ?? Math.max(definition.minIdle, 1),
    maxTotal: definition.maxTotal ?? Math.max(definition.minIdle, 1) * 4,
  }))
  .refine((definition) => definition.minIdle <= definition.maxIdle, {
    message: 'minIdle must not exceed maxIdle',
    path: ['minIdle'],
  })
  .refine((definition) => definition.maxIdle <= definition.maxTotal, {
    message: 'maxIdle must not exceed maxTotal',
    path: ['maxIdle'],
  });
export type PoolDefinitionInput = z.input<typeof PoolDefinitionSchema>;
export type PoolDefinition = z.output<typeof PoolDefinitionSchema>;

export const PoolStatsSchema = z.object({
  name: z.string(),
  definition: z.record(z.string(), z.unknown()),
  idle: z.number().int(),
  leased: z.number().int(),
  creating: z.number().int(),
  /** Acquires answered with a warm sandbox. */
  hits: z.number().int(),
  /** Acquires that fell back to a cold create (none idle, or none healthy). */
  misses: z.number().int(),
  /** Refill creates that failed. */
  failures: z.number().int(),
  /** Idle sandboxes found dead at acquire and thrown away. */
  discarded: z.number().int(),
  /** Idle sandboxes destroyed for age (idleTtlSeconds) and replaced. */
  rotated: z.number().int(),
  /** Acquire latency over the last 1024 acquires, in the daemon (excluding HTTP). */
  acquireLatencyMs: z.object({
    count: z.number().int(),
    p50: z.number(),
    p99: z.number(),
    hitP50: z.number(),
    missP50: z.number(),
  }),
  /** The last refill error, to see why a pool does not fill. */
  lastError: z.string().nullable(),
});
export type PoolStats = z.infer<typeof PoolStatsSchema>;

/** What a create request may change on a sandbox taken from a pool; anything else must match the pool's spec. */
export const POOL_OVERRIDABLE_FIELDS = ['env', 'labels', 'ttlSeconds'] as const;
