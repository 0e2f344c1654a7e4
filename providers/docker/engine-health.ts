/**
 * The Docker provider's health: which engine answers (Docker or Podman), its version, the runtime
 * and whether the engine has it, how timed-out commands are killed (and why not from the host),
 * and whether a declared live fork can be done. Answered, never thrown: an engine that does not
 * answer is `ok: false` with the reason.
 */
import type Docker from 'dockerode';
import type { ProviderCapabilities, ProviderHealth } from '../sandbox-provider.ts';
import { wrapDockerError } from './docker-errors.ts';
import type { EngineTraits } from './engine-kind.ts';
import { checkEngineRuntime, type RuntimeTier } from './runtime-tier.ts';

export interface EngineHealthInputs {
  docker: Docker;
  engine: EngineTraits;
  tier: RuntimeTier;
  /** The OCI runtime asked for, or undefined for the engine's default. */
  runtime: string | undefined;
  timeoutKill: ProviderCapabilities['timeoutKill'];
  /** Why commands cannot be confined and stopped from the host; undefined when they can. */
  hostControlGap: string | undefined;
  /** For a provider that declares live fork: what the engine still lacks for it (null: nothing). */
  liveFork: (() => Promise<string | null>) | undefined;
}

export async function engineHealth(inputs: EngineHealthInputs): Promise<ProviderHealth> {
  const { tier, hostControlGap: gap } = inputs;
  try {
    const version = await inputs.docker.version();
    const engine = await inputs.engine.kind();
    // A runtime the engine lacks, or gVisor without the arguments it needs here, fails every create.
    const runtimeProblems =
      inputs.runtime === undefined ? [] : await checkEngineRuntime(inputs.docker, inputs.runtime);
    // Declared, but the engine may still lack what a live fork needs (--experimental).
    const liveForkGap = inputs.liveFork === undefined ? null : await inputs.liveFork();
    return {
      ok: runtimeProblems.length === 0,
      message:
        `${engine === 'podman' ? 'Podman' : 'Docker'} engine ${version.Version} (API ${version.ApiVersion}), runtime ${tier.runtime}` +
        (runtimeProblems.length > 0 ? `: ${runtimeProblems.join('; ')}` : '') +
        (gap === undefined
          ? '; timed-out commands are killed through their cgroup'
          : inputs.timeoutKill === 'traced'
            ? `; timed-out commands are killed through their tracer inside the sandbox (${gap})`
            : `; timed-out commands are killed from inside the sandbox only, a weaker guarantee (${gap})`) +
        (liveForkGap === null ? '' : `; live fork refused: ${liveForkGap}`),
      details: {
        version: version.Version,
        engine,
        runtime: tier.runtime,
        timeoutKill: inputs.timeoutKill,
        ...(gap === undefined ? {} : { timeoutKillReason: gap }),
        ...(runtimeProblems.length === 0 ? {} : { runtimeProblems }),
        ...(inputs.liveFork === undefined ? {} : { liveFork: liveForkGap === null ? 'ready' : liveForkGap }),
      },
    };
  } catch (error) {
    return { ok: false, message: wrapDockerError(error, { operation: 'ping' }).message };
  }
}
