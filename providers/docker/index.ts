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

/** The daemon's Docker provider; its start removes build containers a dead daemon left behind. */
export const createDockerProvider: SandboxProviderFactory = async (options, context) => {
  const parsed = (options ?? {}) as DockerProviderOptions;
  const provider = new DockerProvider(createDockerClient(parsed), context, parsed);
  await provider.sweepBuildLeftovers();
  return provider;
};
