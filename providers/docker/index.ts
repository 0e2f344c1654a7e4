import Docker from 'dockerode';
import type { SandboxProviderFactory } from '../sandbox-provider.ts';
import {
  DockerProvider,
  type DockerProviderOptions,
  DockerProviderOptionsSchema,
} from './docker-provider.ts';

export type { DockerProviderOptions };
export { DockerProvider, DockerProviderOptionsSchema };

/** Builds the dockerode client from the provider's options (socket path, else dockerode's defaults). */
export function createDockerClient(options: Pick<DockerProviderOptions, 'socketPath'> = {}): Docker {
  return options.socketPath === undefined ? new Docker() : new Docker({ socketPath: options.socketPath });
}

/** How long the provider's start waits for its sweep of build containers. */
const SWEEP_WAIT_MS = 10_000;

/** The daemon's Docker provider; its start removes build containers a dead daemon left behind. */
export const createDockerProvider: SandboxProviderFactory = async (options, context) => {
  const parsed = (options ?? {}) as DockerProviderOptions;
  const provider = new DockerProvider(createDockerClient(parsed), context, parsed);
  // Before the daemon's first reconcile, which would take a parent its live snapshot had stopped
  // for dead. Without a marker (every start but one after a crash mid-snapshot) it reads one folder.
  await provider.resumeInterruptedSnapshots();
  // An engine that does not answer must not hold up the daemon's start: past this, the sweep
  // goes on in the background.
  await Promise.race([
    provider.sweepBuildLeftovers(),
    new Promise((resolve) => setTimeout(resolve, SWEEP_WAIT_MS).unref()),
  ]);
  return provider;
};
