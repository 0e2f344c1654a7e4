/**
 * Scoped credentials: the token holder lends one sandbox (or one rollout's few) with named rights
 * to another process, never the daemon. A credential is `gym-access.<grant id>.<secret>`: the id
 * finds the grant (it is no secret), the secret is 32 random bytes the daemon keeps only as a
 * SHA-256 hash, compared in constant time. Nothing about it derives from a sandbox's id, the
 * daemon's token or anything else a sandbox holds, so an agent cannot compute one.
 *
 * A grant dies at its expiry (never past its sandboxes' leases as they stood when it was minted),
 * at its revocation, or when all of its sandboxes are removed. Grants are written to
 * `access-grants.json` (0600, hashes only) before the API answers, so they survive a restart for
 * as long as their sandboxes do; a file that cannot be read forgets them all, which refuses every
 * credential rather than admit one.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { open, readFile, rename } from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';
import type { Clock } from '../../core/clock.ts';
import { GymError } from '../../core/errors.ts';
import { createId } from '../../core/ids.ts';
import type { Logger } from '../../core/logger.ts';
import {
  ACCESS_GRANT_ID_PATTERN,
  type AccessGrant,
  type AccessGrantCreated,
  AccessGrantRequestSchema,
  AccessRightSchema,
} from '../../core/schemas/access.ts';
import { parseOrThrow } from '../../core/validate.ts';

export const ACCESS_GRANTS_FILE = 'access-grants.json';
const CREDENTIAL_PREFIX = 'gym-access';
const SECRET_BYTES = 32;
const SECRET_PATTERN = /^[A-Za-z0-9_-]{43}$/;

/** What a route lets a scoped credential do (its `config.scoped`); a route without one refuses them all. */
export type ScopedRouteRight = z.infer<typeof AccessRightSchema> | 'inspect' | 'own-grant';

/** The sandboxes a grant may name, as the daemon knows them now. */
export interface GrantTargets {
  /**
   * The lease end (ms since the epoch) of a sandbox a grant may name.
   * @throws GymError `SANDBOX_NOT_FOUND`, `SANDBOX_NOT_READY` (not ready, or idle in a pool).
   */
  leaseExpiresAtMs(sandboxId: string): number;
  /** Whether the daemon still has the sandbox (grants read back at start lose those it has not). */
  isLive(sandboxId: string): boolean;
}

const StoredGrantSchema = z.object({
  id: z.string().regex(ACCESS_GRANT_ID_PATTERN),
  secretSha256: z.string().regex(/^[0-9a-f]{64}$/),
  sandboxIds: z.array(z.string()).min(1),
  rights: z.array(AccessRightSchema).min(1),
  createdAt: z.string(),
  expiresAt: z.string(),
});
type StoredGrant = z.infer<typeof StoredGrantSchema>;
const StoredFileSchema = z.object({ version: z.literal(1), grants: z.array(StoredGrantSchema) });

/** A grant a request authenticated with (read-only to the routes). */
export type ScopedGrant = Readonly<AccessGrant>;

function sha256(text: string): Buffer {
  return createHash('sha256').update(text).digest();
}

function view(grant: StoredGrant): AccessGrant {
  return {
    id: grant.id,
    sandboxIds: [...grant.sandboxIds],
    rights: [...grant.rights],
    createdAt: grant.createdAt,
    expiresAt: grant.expiresAt,
  };
}

/** Whether a bearer value has a scoped credential's shape (the hook then asks the grants, not the token). */
export function isScopedCredential(presented: string): boolean {
  return presented.startsWith(`${CREDENTIAL_PREFIX}.`);
}

export interface AccessGrantsOptions {
  stateDir: string;
  targets: GrantTargets;
  clock: Clock;
  logger: Logger;
}

export class AccessGrants {
  readonly #path: string;
  readonly #targets: GrantTargets;
  readonly #clock: Clock;
  readonly #logger: Logger;
  readonly #grants = new Map<string, StoredGrant>();
  #writing: Promise<void> = Promise.resolve();
  #pending: Promise<void> | undefined;

  private constructor(options: AccessGrantsOptions) {
    this.#path = join(options.stateDir, ACCESS_GRANTS_FILE);
    this.#targets = options.targets;
    this.#clock = options.clock;
    this.#logger = options.logger;
  }

  /** Reads the grants a previous run left; expired ones are dropped, an unreadable file forgets all. */
  static async open(options: AccessGrantsOptions): Promise<AccessGrants> {
    const grants = new AccessGrants(options);
    let text: string | undefined;
    try {
      text = await readFile(grants.#path, 'utf8');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT')
        options.logger.warn({ error: String(error) }, 'scoped access grants unreadable; every one is void');
    }
    if (text !== undefined) {
      try {
        const stored = StoredFileSchema.parse(JSON.parse(text));
        for (const grant of stored.grants) grants.#grants.set(grant.id, grant);
      } catch (error) {
        options.logger.warn({ error: String(error) }, 'scoped access grants file invalid; every one is void');
      }
    }
    grants.#dropExpired();
    const gone = new Set([...grants.#grants.values()].flatMap((grant) => grant.sandboxIds));
    for (const sandboxId of gone) if (!options.targets.isLive(sandboxId)) grants.forgetSandbox(sandboxId);
    return grants;
  }

  /**
   * Mints a grant and its credential (the only time the credential is shown).
   * @throws GymError `VALIDATION_FAILED`, `SANDBOX_NOT_FOUND`, `SANDBOX_NOT_READY`.
   */
  async mint(input: unknown): Promise<AccessGrantCreated> {
    const request = parseOrThrow(AccessGrantRequestSchema, input, 'access grant request');
    const now = this.#clock.now();
    const leaseEnd = Math.min(...request.sandboxIds.map((id) => this.#targets.leaseExpiresAtMs(id)));
    const expiresMs =
      request.ttlSeconds === undefined ? leaseEnd : Math.min(leaseEnd, now + request.ttlSeconds * 1000);
    if (expiresMs <= now)
      throw new GymError('SANDBOX_NOT_READY', 'the lease of a sandbox named has already ended', {
        details: { sandboxIds: request.sandboxIds },
      });
    const secret = randomBytes(SECRET_BYTES).toString('base64url');
    const grant: StoredGrant = {
      id: createId('acc'),
      secretSha256: sha256(secret).toString('hex'),
      sandboxIds: request.sandboxIds,
      rights: request.rights,
      createdAt: new Date(now).toISOString(),
      expiresAt: new Date(expiresMs).toISOString(),
    };
    this.#grants.set(grant.id, grant);
    await this.#persist();
    this.#logger.info(
      { grantId: grant.id, sandboxIds: grant.sandboxIds, rights: grant.rights, expiresAt: grant.expiresAt },
      'scoped access granted',
    );
    return { ...view(grant), token: `${CREDENTIAL_PREFIX}.${grant.id}.${secret}` };
  }

  /**
   * The live grant a credential stands for, or undefined (malformed, unknown, wrong secret,
   * expired, revoked, or its sandboxes gone). The secret's hash is compared in constant time.
   */
  authenticate(presented: string): ScopedGrant | undefined {
    const parts = presented.split('.');
    if (parts.length !== 3 || parts[0] !== CREDENTIAL_PREFIX) return undefined;
    const [, id = '', secret = ''] = parts;
    if (!ACCESS_GRANT_ID_PATTERN.test(id) || !SECRET_PATTERN.test(secret)) return undefined;
    const grant = this.#grants.get(id);
    // Hashed even for an unknown id, so an unknown grant costs what a wrong secret does.
    const presentedHash = sha256(secret);
    const expected =
      grant === undefined ? Buffer.alloc(presentedHash.length) : Buffer.from(grant.secretSha256, 'hex');
    if (!timingSafeEqual(presentedHash, expected) || grant === undefined) return undefined;
    if (Date.parse(grant.expiresAt) <= this.#clock.now()) {
      this.#delete(grant.id);
      return undefined;
    }
    return view(grant);
  }

  /**
   * Refuses what a grant does not allow on the route that runs: `right` is the route's
   * `config.scoped` (undefined: no scoped credential may call it), `routeId` its `:id`.
   * @throws GymError `ACCESS_DENIED`.
   */
  authorize(grant: ScopedGrant, right: ScopedRouteRight | undefined, routeId: string | undefined): void {
    if (right === undefined)
      throw new GymError('ACCESS_DENIED', 'a scoped credential cannot call this route', {
        details: { grantId: grant.id },
      });
    if (right === 'own-grant') {
      if (routeId !== grant.id)
        throw new GymError('ACCESS_DENIED', 'a scoped credential may revoke only itself', {
          details: { grantId: grant.id },
        });
      return;
    }
    if (routeId === undefined || !grant.sandboxIds.includes(routeId))
      throw new GymError('ACCESS_DENIED', 'the scoped credential does not name this sandbox', {
        details: { grantId: grant.id },
      });
    if (right !== 'inspect' && !grant.rights.includes(right))
      throw new GymError('ACCESS_DENIED', `the scoped credential does not grant ${right}`, {
        details: { grantId: grant.id, right, rights: grant.rights },
      });
  }

  /** Every live grant, without secrets. */
  list(): AccessGrant[] {
    this.#dropExpired();
    return [...this.#grants.values()]
      .map(view)
      .sort((left, right) => left.createdAt.localeCompare(right.createdAt));
  }

  /** Revokes a grant; an unknown or already revoked one is a success (idempotent). */
  async revoke(id: string): Promise<void> {
    if (!this.#grants.has(id)) return;
    this.#delete(id);
    await this.#persist();
    this.#logger.info({ grantId: id }, 'scoped access revoked');
  }

  /** A sandbox was removed: grants lose it, and a grant left with none dies. */
  forgetSandbox(sandboxId: string): void {
    let changed = false;
    for (const grant of this.#grants.values()) {
      if (!grant.sandboxIds.includes(sandboxId)) continue;
      changed = true;
      grant.sandboxIds = grant.sandboxIds.filter((id) => id !== sandboxId);
      if (grant.sandboxIds.length === 0) this.#grants.delete(grant.id);
    }
    if (changed)
      this.#persist().catch((error: unknown) =>
        this.#logger.warn({ error: String(error) }, 'writing scoped access grants failed'),
      );
  }

  #delete(id: string): void {
    this.#grants.delete(id);
  }

  #dropExpired(): void {
    const now = this.#clock.now();
    for (const grant of [...this.#grants.values()])
      if (Date.parse(grant.expiresAt) <= now) this.#grants.delete(grant.id);
  }

  /**
   * Writes every grant atomically (temporary file, fsync, rename), one write at a time; changes
   * made while a write waits its turn ride on it (a burst of removals is one write, not one each).
   * Resolves once a write that began after the caller's change is on disk.
   */
  #persist(): Promise<void> {
    if (this.#pending !== undefined) return this.#pending;
    const write = this.#writing.then(async () => {
      this.#pending = undefined;
      const temporary = `${this.#path}.tmp`;
      const handle = await open(temporary, 'w', 0o600);
      try {
        const grants = [...this.#grants.values()];
        await handle.writeFile(`${JSON.stringify({ version: 1, grants })}\n`);
        await handle.datasync();
      } finally {
        await handle.close();
      }
      await rename(temporary, this.#path);
    });
    this.#pending = write;
    this.#writing = write.catch(() => {});
    return write;
  }
}
