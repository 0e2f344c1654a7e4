/** Image sets that environments need (`gym image build swe-mini`): the CLI composes environments and images. */
import type Docker from 'dockerode';
import type { Logger } from '../core/logger.ts';
import {
  BASE_COMMIT_COMMAND,
  DETERMINISTIC_GIT_ENV,
  SWE_MINI_WORKDIR,
  taskImage,
} from '../environments/swe-mini/repository.ts';
import { SWE_MINI_TASKS } from '../environments/swe-mini/tasks.ts';
import { ImageBuilder, imageReference } from '../images/build.ts';
import { findImageDefinition } from '../images/definitions.ts';
import { buildRepositoryImage } from '../images/repository-image.ts';

export const IMAGE_SETS = ['swe-mini'] as const;

/** Builds every swe-mini task image that is missing (and the Debian base under them). */
export async function buildSweMiniImages(
  docker: Docker,
  logger: Logger,
  onImage?: (reference: string, built: boolean) => void,
): Promise<void> {
  const baseDefinition = findImageDefinition('debian-base')!;
  await new ImageBuilder(docker, logger).build(baseDefinition);
  const baseImage = await imageReference(baseDefinition);
  for (const task of SWE_MINI_TASKS) {
    const result = await buildRepositoryImage(docker, {
      baseImage,
      reference: taskImage(task),
      workdir: SWE_MINI_WORKDIR,
      files: task.files,
      command: BASE_COMMIT_COMMAND,
      env: DETERMINISTIC_GIT_ENV,
    });
    onImage?.(result.reference, result.built);
  }
}
