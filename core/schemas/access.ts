/**
 * Scoped access: a credential the token holder mints to lend one sandbox (or the few of one
 * rollout) to another process with named rights, never the daemon (docs/api.md, "Scoped access").
 */
import { z } from 'zod';
import { SANDBOX_ID_PATTERN } from '../ids.ts';

/**
 * What a scoped credential may do on its sandboxes. `exec`: run commands (and stop them);
 * `files`: files and archives in and out; `endpoints`: make the model gateway reachable inside;
 * `pty`: terminal sessions (`/ptys/...`: open, attach, read, write, resize, signal, close). Reading its own sandboxes'
 * records comes with every grant. Create, destroy, keepalive, fork, snapshots, network policy,
 * pools, images, rollouts and other sandboxes come with none.
 */
export const ACCESS_RIGHTS = ['exec', 'files', 'pty', 'endpoints'] as const;
export const AccessRightSchema = z.enum(ACCESS_RIGHTS);
export type AccessRight = z.infer<typeof AccessRightSchema>;

/** One rollout's sandboxes at most: an agent's, its verifier's, a few services. */
export const MAX_SANDBOXES_PER_GRANT = 16;

/** The shape every grant id has (`acc-` and 16 random letters or digits). */
export const ACCESS_GRANT_ID_PATTERN = /^acc-[a-z0-9]{16}$/;

export const AccessGrantRequestSchema = z
  .object({
    /** The sandboxes lent; each must be live (not idle in a pool) when the grant is minted. */
    sandboxIds: z
      .array(z.string().regex(SANDBOX_ID_PATTERN, { message: 'not a sandbox id' }))
      .min(1)
      .max(MAX_SANDBOXES_PER_GRANT)
      .refine((ids) => new Set(ids).size === ids.length, { message: 'a sandbox is named twice' }),
    /** The rights, at least one. */
    rights: z
      .array(AccessRightSchema)
      .min(1)
      .refine((rights) => new Set(rights).size === rights.length, { message: 'a right is named twice' }),
    /**
     * How long the credential lives, in seconds; never past the earliest lease of its sandboxes
     * as it stands when minted (absent: until then).
     */
    ttlSeconds: z.number().int().positive().optional(),
  })
  .strict();
export type AccessGrantRequest = z.infer<typeof AccessGrantRequestSchema>;

/** A grant as listed: everything but its secret, which the daemon keeps only as a hash. */
export const AccessGrantSchema = z.object({
  id: z.string(),
  sandboxIds: z.array(z.string()),
  rights: z.array(AccessRightSchema),
  createdAt: z.string(),
  expiresAt: z.string(),
});
export type AccessGrant = z.infer<typeof AccessGrantSchema>;

/** The answer to a mint: the grant and its credential, shown this once. */
export const AccessGrantCreatedSchema = AccessGrantSchema.extend({
  /** The bearer credential (`gym-access.<id>.<secret>`); the daemon cannot show it again. */
  token: z.string(),
});
export type AccessGrantCreated = z.infer<typeof AccessGrantCreatedSchema>;

export const AccessGrantListSchema = z.object({ grants: z.array(AccessGrantSchema) });
