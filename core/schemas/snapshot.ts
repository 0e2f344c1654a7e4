/**
 * Snapshots and forks (HTTP API v1): a sandbox's filesystem kept as a reference specs can name
 * (`snapshot:<id>`), and N new sandboxes made from it at once, each knowing where it came from.
 *
 * A snapshot is made one of two ways, and the API shows which:
 * - `native`: the backend's own copy (Docker commits the container to an image).
 * - `archive`: the provider-neutral fallback of `providers/shared/archive-snapshot.ts`: the paths
 *   that changed since the sandbox was created, as a tar the daemon keeps, replayed onto the base
 *   image in each child (with the paths the parent removed removed again).
 */
import { z } from 'zod';
import { EnvSchema, LabelsSchema } from './common.ts';

/** How a spec names a snapshot: `snapshot:<id>`. */
export const SNAPSHOT_REF_PREFIX = 'snapshot:';

const SnapshotIdSchema = z
  .string()
  .regex(/^snp_[a-z0-9]{16}$/, { message: 'a snapshot id is snp_ and 16 of a-z0-9' });

/** The spec image that names snapshot `id`. */
export function snapshotRef(id: string): string {
  return SNAPSHOT_REF_PREFIX + id;
}

/** The snapshot id a spec image names, or null when it names an ordinary image. */
export function parseSnapshotRef(image: string): string | null {
  if (!image.startsWith(SNAPSHOT_REF_PREFIX)) return null;
  const id = image.slice(SNAPSHOT_REF_PREFIX.length);
  return SnapshotIdSchema.safeParse(id).success ? id : null;
}

/** Where a forked sandbox came from. */
export const SandboxLineageSchema = z.object({
  /** The sandbox it was forked from (which may be gone by now). */
  parent: z.string(),
  /** The snapshot it was made from. */
  snapshot: z.string(),
  /** Its place among the children of one fork request, from 0. */
  forkIndex: z.number().int().nonnegative(),
});
export type SandboxLineage = z.infer<typeof SandboxLineageSchema>;

/** The labels a fork child carries (under the reserved `gym.` prefix no caller may set). */
export const LINEAGE_LABELS = {
  parent: 'gym.fork.parent',
  snapshot: 'gym.fork.snapshot',
  forkIndex: 'gym.fork.index',
} as const;

export const SnapshotMethodSchema = z.enum(['native', 'archive']);
export type SnapshotMethod = z.infer<typeof SnapshotMethodSchema>;

/** A snapshot as the API shows it. */
export const SnapshotInfoSchema = z.object({
  id: SnapshotIdSchema,
  /** What a spec names to start from it: `snapshot:<id>`. */
  image: z.string(),
  provider: z.string(),
  /** The sandbox it was taken of (which may be gone by now). */
  sandboxId: z.string(),
  /** The image the sandbox was created from (what an `archive` snapshot is replayed onto). */
  baseImage: z.string(),
  method: SnapshotMethodSchema,
  /**
   * It holds memory and processes too (`live`, the `liveFork` capability): a sandbox made from it
   * starts with the processes its source had running. False for records made before it existed.
   */
  live: z.boolean().default(false),
  createdAt: z.string(),
  /** The reaper removes it after this (unless a pool still starts from it: then when the pool goes). */
  expiresAt: z.string(),
  /** Its size where known (an archive's bytes; a native image's size as the backend reports it). */
  sizeBytes: z.number().int().nonnegative().nullable(),
  labels: LabelsSchema,
});
export type SnapshotInfo = z.infer<typeof SnapshotInfoSchema>;

/**
 * `POST /v1/sandboxes/{id}/snapshot`. Without `image`: a managed snapshot (labelled, reaped after
 * `ttlSeconds`, counted against the configured limits), answered with its `snapshot` record. With
 * `image`: the older named commit to that image (Docker only, a name the operator allows).
 */
export const SnapshotRequestSchema = z
  .object({
    image: z.string().min(1).max(512).optional(),
    ttlSeconds: z.number().int().positive().optional(),
    labels: LabelsSchema.optional(),
    /**
     * A managed snapshot of memory and processes too (the `liveFork` capability): every sandbox
     * made from it, a pool's members included, starts with them running. Refused with
     * `CAPABILITY_UNSUPPORTED` where the provider cannot.
     */
    live: z.boolean().optional(),
  })
  .strict();
/** `image` is what later specs name, exactly as returned; `snapshot` is there for a managed snapshot. */
export const SnapshotResponseSchema = z.object({
  image: z.string(),
  snapshot: SnapshotInfoSchema.optional(),
});

/** The most children one fork request makes (more: several requests, each admitted like creates). */
export const MAX_FORK_COUNT = 64;

/**
 * `POST /v1/sandboxes/{id}/fork`: `count` new sandboxes whose files equal the parent's at fork
 * time, each with its own lease; the parent keeps running. The children's spec is the parent's
 * (image replaced by the snapshot) with these overrides; an exec environment given to the parent
 * (a pool claim's env, a rollout's keys) is never carried over.
 */
export const ForkRequestSchema = z
  .object({
    count: z.number().int().min(1).max(MAX_FORK_COUNT),
    /** Added to (and overriding) the parent's user labels in every child. */
    labels: LabelsSchema.optional(),
    /** Added to (and overriding) the parent spec's env in every child. */
    env: EnvSchema.optional(),
    ttlSeconds: z.number().int().positive().optional(),
    /** How long the snapshot the children came from is kept (default: the configured snapshot TTL). */
    snapshotTtlSeconds: z.number().int().positive().optional(),
    /**
     * Carry memory and processes over too (the `liveFork` capability). Refused with
     * `CAPABILITY_UNSUPPORTED` where the provider cannot: never a silent files-only fork.
     */
    live: z.boolean().default(false),
  })
  .strict();
export type ForkRequest = z.output<typeof ForkRequestSchema>;
export type ForkRequestInput = z.input<typeof ForkRequestSchema>;

export const SnapshotListSchema = z.object({ snapshots: z.array(SnapshotInfoSchema) });
