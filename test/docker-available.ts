/**
 * Decides whether tests that need a Docker engine run. Without an engine they skip, except when
 * GYM_REQUIRE_DOCKER=1 (CI sets it): then a missing engine fails the run instead of hiding a hole.
 */
import type Docker from 'dockerode';
import type { ImagePreparer } from '../cli/task-images.ts';
import { silentLogger } from '../core/logger.ts';
import { requireImages } from '../daemon/capabilities.ts';
import { ImageService } from '../daemon/images.ts';
import { ImageBuilder, imageReference } from '../images/build.ts';
import { findImageDefinition } from '../images/definitions.ts';
import { createDockerClient, DockerProvider } from '../providers/docker/index.ts';
import { testContext } from './fixtures/provider-context.ts';

export const isDockerRequired = process.env.GYM_REQUIRE_DOCKER === '1';

export interface DockerTestEnvironment {
  docker: Docker;
  /** Undefined when tests can run; otherwise why they skip. */
  skipReason: string | undefined;
}

export async function dockerTestEnvironment(): Promise<DockerTestEnvironment> {
  const docker = createDockerClient();
  try {
    await docker.ping();
    return { docker, skipReason: undefined };
  } catch (error) {
    const reason = `no Docker engine answers (${(error as Error).message}); start one with scripts/setup.sh`;
    if (isDockerRequired) throw new Error(`GYM_REQUIRE_DOCKER=1 but ${reason}`);
    return { docker, skipReason: reason };
  }
}

/** The reference of a built-in image, building it first when it is missing (busybox takes a second). */
export async function testImage(docker: Docker, name: 'busybox' | 'debian-base'): Promise<string> {
  const definition = findImageDefinition(name)!;
  const reference = await imageReference(definition);
  const builder = new ImageBuilder(
    requireImages('docker', new DockerProvider(docker, testContext())),
    silentLogger,
  );
  if (!(await builder.exists(reference))) {
    if (name !== 'busybox' && !isDockerRequired) return reference;
    await builder.build(definition);
  }
  return reference;
}

/**
 * The daemon's image service over a Docker provider of its own, for tests that need task images
 * before any daemon runs (`buildSweMiniImages(localImages(docker))`).
 */
export function localImages(docker: Docker): ImagePreparer {
  const service = new ImageService({
    providers: new Map([['docker', new DockerProvider(docker, testContext())]]),
    defaultProvider: () => 'docker',
    logger: silentLogger,
  });
  return { prepareImage: (request) => service.prepare(request) };
}

/** Removes every container a test daemon of `namespace` left (its label says whose it is). */
export async function removeNamespaceContainers(docker: Docker, namespace: string): Promise<void> {
  const containers = await docker.listContainers({
    all: true,
    filters: { label: [`gym.namespace=${namespace}`] },
  });
  for (const container of containers) await docker.getContainer(container.Id).remove({ force: true });
}

/** Removes the images with a tag `pattern` matches (the ones a test built, by their random tags). */
export async function removeImagesTagged(docker: Docker, pattern: RegExp): Promise<void> {
  for (const image of await docker.listImages())
    for (const tag of image.RepoTags ?? [])
      if (pattern.test(tag))
        await docker
          .getImage(tag)
          .remove({ force: true })
          .catch(() => {});
}
