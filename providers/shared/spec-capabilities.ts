/**
 * The one check of what a spec asks of its provider beyond the required operations: gpus, a
 * disk limit, declared ports, and its network mode (the names are ours; each provider declares which it has).
 * The daemon runs it before a request reaches the provider; a provider used on its own runs the
 * same function in `create`, so the two can never disagree.
 */
import { GymError } from '../../core/errors.ts';
import type { SandboxSpec } from '../../core/schemas/sandbox.ts';
import type { CapabilityHints, ProviderCapabilities } from '../sandbox-provider.ts';

/** `CAPABILITY_UNSUPPORTED` with details `{ provider, capability, ... }`. */
export function capabilityUnsupported(
  providerName: string,
  capability: keyof ProviderCapabilities,
  message: string,
  details: Record<string, unknown> = {},
): GymError {
  return new GymError('CAPABILITY_UNSUPPORTED', `provider ${providerName} ${message}`, {
    details: { provider: providerName, capability, ...details },
  });
}

/**
 * @param hints appended to the message of a missing capability the operator could turn on.
 * @throws GymError `CAPABILITY_UNSUPPORTED` naming the first capability the spec needs and the
 *   provider lacks.
 */
export function requireSpecCapabilities(
  providerName: string,
  capabilities: ProviderCapabilities,
  spec: Pick<SandboxSpec, 'resources' | 'network'> & Partial<Pick<SandboxSpec, 'ports' | 'services'>>,
  hints: CapabilityHints = {},
): void {
  const hinted = (message: string, hint: string | undefined) =>
    hint === undefined ? message : `${message}: ${hint}`;
  if ((spec.resources?.gpus ?? 0) > 0 && !capabilities.gpus) {
    throw capabilityUnsupported(
      providerName,
      'gpus',
      hinted('cannot give a sandbox gpus (resources.gpus)', hints.gpus),
    );
  }
  if (spec.resources?.diskMiB !== undefined && !capabilities.diskLimit) {
    throw capabilityUnsupported(
      providerName,
      'diskLimit',
      hinted("cannot limit a sandbox's disk (resources.diskMiB)", hints.diskLimit),
    );
  }
  if ((spec.ports?.length ?? 0) > 0 && capabilities.ports !== true) {
    throw capabilityUnsupported(
      providerName,
      'ports',
      'cannot carry declared ports (ports): it has no relay over its exec channel',
      { ports: [...(spec.ports ?? [])] },
    );
  }
  const services = spec.services ?? [];
  if (services.length > 0 && capabilities.services !== true) {
    throw capabilityUnsupported(
      providerName,
      'services',
      `cannot run a task's other containers beside its sandbox (spec.services: ${services.map((service) => service.name).join(', ')}): a multi-container task (Compose) runs on a provider with the services capability (Docker with runc, Kubernetes)`,
      { services: services.map((service) => service.name) },
    );
  }
  if (!capabilities.networkModes.includes(spec.network)) {
    throw capabilityUnsupported(
      providerName,
      'networkModes',
      `has no network mode "${spec.network}"; it has: ${capabilities.networkModes.join(', ')}`,
      { network: spec.network, available: [...capabilities.networkModes] },
    );
  }
}
