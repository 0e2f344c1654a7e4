/** The sandboxes a scoped grant may name, read from the daemon's lifecycle. */
import { GymError } from '../../core/errors.ts';
import type { SandboxLifecycle } from '../sandboxes/lifecycle.ts';
import type { AccessGrants, GrantTargets } from './grants.ts';

/** A sandbox is lent only while it is ready and handed out (a pool's idle one belongs to no one yet). */
export function lifecycleTargets(lifecycle: SandboxLifecycle): GrantTargets {
  return {
    leaseExpiresAtMs(sandboxId) {
      const record = lifecycle.record(sandboxId);
      const sandbox = lifecycle.view(record);
      if (record.poolState === 'idle' || sandbox.state !== 'ready')
        throw new GymError(
          'SANDBOX_NOT_READY',
          `sandbox ${sandboxId} is ${record.poolState === 'idle' ? 'idle in a pool' : sandbox.state}; only a ready sandbox is lent`,
          { details: { sandboxId } },
        );
      return Date.parse(sandbox.leaseExpiresAt);
    },
    isLive(sandboxId) {
      try {
        lifecycle.record(sandboxId);
        return true;
      } catch {
        return false;
      }
    },
  };
}

/** Grants die with their sandboxes: every removal (destroy, reap, found gone) reaches them. */
export function forgetRemovedSandboxes(lifecycle: SandboxLifecycle, grants: AccessGrants): void {
  lifecycle.onRemoved((record) => grants.forgetSandbox(record.id));
}
