/**
 * Resource limits as the operator configured them: a spec that leaves a limit out gets the
 * configured default, and a spec that asks for more than the configured maximum is refused.
 * Applied to every spec the daemon creates from (requests, pools, pool fallbacks), so no sandbox
 * runs without cpu, memory and pids limits.
 */
import { GymError } from '../core/errors.ts';
import type { SandboxSpec } from '../core/schemas/sandbox.ts';
import type { DaemonConfig } from './config.ts';

const LIMITED = ['cpus', 'memoryMiB', 'pidsLimit'] as const;

/** The spec with every unset limit filled from `defaults.resources`; throws VALIDATION_FAILED past `maxResources`. */
export function applyResourceLimits(
  spec: SandboxSpec,
  config: Pick<DaemonConfig, 'defaults' | 'maxResources'>,
): SandboxSpec {
  const resources = { ...spec.resources };
  for (const name of LIMITED) {
    const value = resources[name] ?? config.defaults.resources[name];
    const max = config.maxResources[name];
    if (max !== undefined && value > max) {
      throw new GymError(
        'VALIDATION_FAILED',
        `invalid sandbox spec: resources.${name}: ${value} is more than the daemon allows (maxResources.${name} is ${max})`,
        {
          details: {
            issues: [{ path: `resources.${name}`, message: `must be at most ${max}` }],
            setting: `maxResources.${name}`,
          },
        },
      );
    }
    resources[name] = value;
  }
  return { ...spec, resources };
}
