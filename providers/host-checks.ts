/**
 * What `gym doctor` checks of the daemon's host for each configured provider: the tools the
 * provider runs there and the privileges it needs. Each built-in provider's checks live beside it,
 * named by its row in `registry.ts`, and load only when that provider is configured: a host set
 * up for Kubernetes is never asked for Docker's exec helper or nsenter.
 */
import type { HostCheck, HostCheckContext } from '../core/host-check.ts';
import { builtInProviderOf, type ProviderRegistration } from './registry.ts';

export type { HostCheck, HostCheckContext } from '../core/host-check.ts';

/** A provider's host checks, and what to do when its health check fails. */
export interface ProviderHostChecks {
  run(context: HostCheckContext): Promise<HostCheck[]>;
  /** The fix printed when the provider's backend does not answer. */
  unhealthyFix?: string;
}

/** The host checks of a configured provider: a built-in one's; none for a third-party module, whatever its name. */
export function hostChecksOf(
  registration: Pick<ProviderRegistration, 'name' | 'module'>,
): ProviderHostChecks | undefined {
  const row = builtInProviderOf(registration);
  if (row === undefined) return undefined;
  return {
    run: row.hostChecks,
    ...(row.unhealthyFix === undefined ? {} : { unhealthyFix: row.unhealthyFix }),
  };
}
