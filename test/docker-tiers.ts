/**
 * The isolation tiers the Docker provider's tests run under: the engine's default runtime (runc),
 * gVisor's `runsc` registered in the same engine, and Podman's Docker-compatible service
 * (docs/isolation-tiers.md). A tier that is not set up here skips its tests, except when
 * GYM_REQUIRE_DOCKER=1 (CI): then it fails the run, as a missing engine does.
 */
import type Docker from 'dockerode';
import { createDockerClient, type DockerProviderOptions } from '../providers/docker/index.ts';
import { checkEngineRuntime } from '../providers/docker/runtime-tier.ts';
import type { ProviderCapabilities } from '../providers/sandbox-provider.ts';
import { isDockerRequired } from './docker-available.ts';

export type TierName = 'runc' | 'runsc' | 'podman';

/** Where scripts/setup.sh starts the Podman service for the tests (GYM_PODMAN_SOCKET overrides). */
export const PODMAN_SOCKET = process.env.GYM_PODMAN_SOCKET ?? '/run/podman/gym-podman.sock';

export interface DockerTier {
  name: TierName;
  /** A client of the tier's engine. */
  docker: Docker;
  /** What the provider is given for this tier. */
  providerOptions: DockerProviderOptions;
  /** Undefined when the tier's tests run; otherwise why they skip. */
  skipReason: string | undefined;
  /**
   * What the provider declares differently under this tier (docs/isolation-tiers.md says why):
   * the contract registers no case for what it lacks, and checks the built provider says the same.
   */
  capabilities: Partial<ProviderCapabilities>;
}

/**
 * The exec helper the tiers' providers mount, when GYM_TEST_EXEC_HELPER names one (a helper built
 * from a changed gym-exec.c, tried before scripts/setup.sh rebuilds .tools/gym-exec); else the default.
 */
export const TEST_EXEC_HELPER: { execHelperPath?: string } =
  process.env.GYM_TEST_EXEC_HELPER === undefined ? {} : { execHelperPath: process.env.GYM_TEST_EXEC_HELPER };

/** The declared differences of each tier from runc's. */
export const TIER_CAPABILITIES: Record<TierName, Partial<ProviderCapabilities>> = {
  runc: { timeoutKill: 'cgroup', stopProcesses: true, gatewayReach: true, liveFork: false },
  runsc: {
    timeoutKill: 'traced',
    stopProcesses: true,
    gatewayReach: false,
    limitOverrun: 'sandbox',
    keeperKillable: true,
    liveFork: true,
  },
  podman: { timeoutKill: 'cgroup', stopProcesses: true, gatewayReach: true, liveFork: false },
};

function unavailable(name: TierName, docker: Docker, reason: string): DockerTier {
  if (isDockerRequired) throw new Error(`GYM_REQUIRE_DOCKER=1 but the ${name} tier is not set up: ${reason}`);
  return { name, docker, providerOptions: {}, skipReason: reason, capabilities: TIER_CAPABILITIES[name] };
}

/**
 * The tier `name`, checked: runsc registered in the engine with the arguments it needs, or the
 * Podman service answering with the test image loaded into its store (copied from the Docker
 * engine's, where the image build put it).
 */
export async function dockerTier(name: TierName, images: string[] = []): Promise<DockerTier> {
  const engine = createDockerClient();
  if (name === 'runc')
    return {
      name,
      docker: engine,
      providerOptions: { ...TEST_EXEC_HELPER },
      skipReason: undefined,
      capabilities: TIER_CAPABILITIES[name],
    };
  if (name === 'runsc') {
    const problems = await checkEngineRuntime(engine, 'runsc').catch((error: Error) => [error.message]);
    if (problems.length > 0)
      return unavailable(name, engine, `${problems.join('; ')} (scripts/setup.sh registers it)`);
    return {
      name,
      docker: engine,
      providerOptions: { runtime: 'runsc', ...TEST_EXEC_HELPER },
      skipReason: undefined,
      capabilities: TIER_CAPABILITIES[name],
    };
  }
  const podman = createDockerClient({ socketPath: PODMAN_SOCKET });
  try {
    await podman.ping();
  } catch (error) {
    return unavailable(
      name,
      podman,
      `no Podman service answers on ${PODMAN_SOCKET} (${(error as Error).message}); scripts/setup.sh starts one`,
    );
  }
  for (const image of images) await copyImage(engine, podman, image);
  return {
    name,
    docker: podman,
    providerOptions: { socketPath: PODMAN_SOCKET, ...TEST_EXEC_HELPER },
    skipReason: undefined,
    capabilities: TIER_CAPABILITIES[name],
  };
}

/** Loads `image` from one engine's store into another's when the second lacks it (`docker save | podman load`). */
async function copyImage(from: Docker, to: Docker, image: string): Promise<void> {
  const present = await to
    .getImage(image)
    .inspect()
    .then(
      () => true,
      () => false,
    );
  if (present) return;
  const archive = await from.getImage(image).get();
  const loaded = await to.loadImage(archive);
  await new Promise<void>((resolve, reject) => {
    loaded.on('error', reject);
    loaded.on('end', resolve);
    loaded.resume();
  });
}
