/**
 * A new sandbox's id and times, computed in one place. The daemon computes them before it calls
 * `create` (it records the id first, and every provider then gets the same lease arithmetic);
 * a provider used on its own (tests, benchmarks) falls back to the same function.
 *
 * The lease never passes the deadline: a sandbox whose ttl is longer than the operator's maximum
 * lifetime gets a lease that ends at the deadline, on every provider alike.
 */
import type { Clock } from '../../core/clock.ts';
import { createId } from '../../core/ids.ts';
import type { SandboxInfo, SandboxSpec } from '../../core/schemas/sandbox.ts';

/** When a sandbox was made, until when its lease holds, and the deadline no renewal passes. */
export interface SandboxTimes {
  createdAt: string;
  leaseExpiresAt: string;
  deadlineAt: string;
}

export interface SandboxIdentity extends SandboxTimes {
  id: string;
}

/**
 * The times of a sandbox made now: a lease of `ttlSeconds` capped at the deadline, which is
 * `maxLifetimeSeconds` after creation.
 */
export function sandboxTimes(clock: Clock, ttlSeconds: number, maxLifetimeSeconds: number): SandboxTimes {
  const createdAtMs = clock.now();
  const deadlineAtMs = createdAtMs + maxLifetimeSeconds * 1000;
  const leaseExpiresAtMs = Math.min(createdAtMs + ttlSeconds * 1000, deadlineAtMs);
  return {
    createdAt: new Date(createdAtMs).toISOString(),
    leaseExpiresAt: new Date(leaseExpiresAtMs).toISOString(),
    deadlineAt: new Date(deadlineAtMs).toISOString(),
  };
}

/**
 * The identity a provider's `create` uses: the id and times the daemon passed in
 * (`CreateOptions`), or new ones computed the same way when it passed none.
 */
export function sandboxIdentity(
  options: { id?: string; times?: SandboxTimes },
  context: { clock: Clock; maxLifetimeSeconds: number },
  ttlSeconds: number,
): SandboxIdentity {
  return {
    id: options.id ?? createId('sbx'),
    ...(options.times ?? sandboxTimes(context.clock, ttlSeconds, context.maxLifetimeSeconds)),
  };
}

/**
 * The info a provider's `create` returns: the identity, the spec's image and labels, the
 * context's namespace and daemon, `ready`, and where the provider placed it.
 */
export function newSandboxInfo(
  provider: string,
  { id, createdAt, leaseExpiresAt, deadlineAt }: SandboxIdentity,
  spec: Pick<SandboxSpec, 'image' | 'labels'>,
  context: { namespace: string; daemonId: string },
  placed: { pool: string | null; providerRef: string; scope?: string },
): SandboxInfo {
  const { namespace, daemonId } = context;
  const [image, labels] = [spec.image, { ...spec.labels }];
  return {
    id,
    provider,
    state: 'ready',
    image,
    labels,
    namespace,
    daemonId,
    createdAt,
    leaseExpiresAt,
    deadlineAt,
    ...placed,
  };
}
