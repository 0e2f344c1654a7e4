/**
 * What `gym doctor` checks of the daemon's host for each configured provider: the tools the
 * provider runs there and the privileges it needs. Each built-in provider's checks live beside it
 * and load only when that provider is configured (as its module does, see `registry.ts`): a host
 * set up for Kubernetes is never asked for Docker's exec helper or nsenter.
 */
import type { ProviderRegistration } from './registry.ts';

/** One line of `gym doctor`. */
export interface HostCheck {
  name: string;
  ok: boolean;
  detail: string;
  fix?: string;
  /** False for what works without it (a warning): only required checks decide the exit code. */
  required?: boolean;
}

export interface HostCheckContext {
  /** The provider's options as configured (not yet validated: the checks read them loosely). */
  options: Readonly<Record<string, unknown>>;
  /** The environment of the command (its PATH finds tools). */
  env: Readonly<Record<string, string | undefined>>;
}

/** A provider's host checks, and what to do when its health check fails. */
export interface ProviderHostChecks {
  run(context: HostCheckContext): Promise<HostCheck[]>;
  /** The fix printed when the provider's backend does not answer. */
  unhealthyFix?: string;
}

const relayChecks = (provider: string): ProviderHostChecks => ({
  run: async (context) => (await import('./shared/relay-host-check.ts')).relayHelperChecks(provider, context),
});

/** The host checks of the built-in providers, each module loaded only when asked. */
export const BUILT_IN_HOST_CHECKS: Readonly<Record<string, ProviderHostChecks>> = Object.freeze({
  docker: {
    run: async (context) => (await import('./docker/host-checks.ts')).dockerHostChecks(context),
    unhealthyFix: 'start the engine: `dockerd --bridge=none --iptables=false &` (scripts/setup.sh does this)',
  },
  kubernetes: relayChecks('kubernetes'),
  apptainer: relayChecks('apptainer'),
  enroot: relayChecks('enroot'),
});

/** The host checks of a configured provider: a built-in one's; none for a third-party module, whatever its name. */
export function hostChecksOf(
  registration: Pick<ProviderRegistration, 'name' | 'module'>,
): ProviderHostChecks | undefined {
  return registration.module === undefined ? BUILT_IN_HOST_CHECKS[registration.name] : undefined;
}
