/**
 * What a Docker provider declares it can do, from its runtime (runc or gVisor), how it reaches
 * the host's processes (a cgroup of its own per command, or tags), whether the exec helper is
 * mounted, whether the engine is local, and the operator's options.
 */
import type { z } from 'zod';
import { GymError } from '../../core/errors.ts';
import { NetworkModeSchema } from '../../core/schemas/sandbox.ts';
import type { ProviderCapabilities } from '../sandbox-provider.ts';
import type { DockerProviderOptionsSchema } from './options.ts';
import type { RuntimeTier } from './runtime-tier.ts';

export interface CapabilityInputs {
  tier: RuntimeTier;
  /** How timed-out commands are confined and stopped from the host (`process-control.ts`). */
  hostControl: 'cgroup' | 'tagged';
  helperMounted: boolean;
  /** The engine is reached through a local unix socket (its root directory is this host's). */
  isEngineLocal: boolean;
  options: Pick<z.output<typeof DockerProviderOptionsSchema>, 'gpus' | 'diskQuota' | 'gatewayReach'>;
}

export function dockerCapabilities(inputs: CapabilityInputs): ProviderCapabilities {
  const { tier, helperMounted, options } = inputs;
  // Under gVisor the helper is still the keeper, but the host cannot see the guest's processes.
  const hasHostControl = inputs.hostControl === 'cgroup' && tier.hostControlGap === undefined;
  // There the keeper stops them from inside (`stopGuestProcesses`), which needs only the helper.
  const canStopInGuest = helperMounted && tier.hasGuestKernel;
  return {
    sessions: true,
    snapshot: true,
    // gVisor's checkpoint (live-fork.ts), started again from a copy in the engine's root
    // directory: a local engine only. Whether the engine runs with --experimental is asked at use.
    // It asks the exec helper (the host's, read-only) what in the guest blocks a restore.
    liveFork: tier.hasGuestKernel && inputs.isEngineLocal && helperMounted,
    gpus: options.gpus,
    diskLimit: options.diskQuota,
    // What the engine has; which of them specs may use is the operator's (allowedNetworkModes,
    // checked at create as FORBIDDEN_BY_CONFIG).
    networkModes: [...NetworkModeSchema.options],
    gatewayReach: options.gatewayReach && !tier.hasGuestKernel,
    // Through the relay over an exec: every runtime and network mode (`port-relay.ts`).
    ports: true,
    // Companions join the sandbox's network namespace, which gVisor keeps inside its own kernel.
    services: !tier.hasGuestKernel,
    // Under gVisor each command runs traced by the helper, which takes all it started when killed.
    timeoutKill: hasHostControl ? 'cgroup' : canStopInGuest ? 'traced' : 'tagged',
    stopProcesses: hasHostControl || canStopInGuest,
    ...(tier.hasGuestKernel ? { limitOverrun: 'sandbox' as const, keeperKillable: true } : {}),
    // The engine's change list and archive reads need nothing on the host but the engine.
    toolchainCheck: true,
    imageFormats: ['rootfs', 'derived', 'plan'],
    // An exec with `Tty`, resized through the engine: every runtime has it.
    pty: true,
  };
}

/** Why gateway reach is not offered, as the error that refuses it. */
export function gatewayReachUnsupported(provider: string, tier: RuntimeTier): GymError {
  const why = tier.hasGuestKernel
    ? `runtime ${tier.runtime} runs its own network stack, which the relay on the sandbox's host loopback does not reach`
    : 'it is off in the options';
  return new GymError(
    'CAPABILITY_UNSUPPORTED',
    `gatewayReach is not offered by this docker provider: ${why}`,
    {
      details: { provider, capability: 'gatewayReach', runtime: tier.runtime },
    },
  );
}

/** Why stopping processes is not offered (`reason`: what keeps the host from the container's processes). */
export function stopProcessesUnsupported(
  provider: string,
  tier: RuntimeTier,
  reason: string | undefined,
): GymError {
  return new GymError('CAPABILITY_UNSUPPORTED', 'this docker provider cannot stop processes from the host', {
    details: {
      provider,
      capability: 'stopProcesses',
      runtime: tier.runtime,
      ...(reason === undefined ? {} : { reason }),
    },
  });
}
