/**
 * Image sets that environments need (`gym image build swe-mini`, `gym eval run`): the CLI
 * composes environments and images, and asks the daemon to build them on its provider.
 */
import type { PrepareImageRequest, PrepareImageResponse } from '../core/schemas/image.ts';
import {
  BASE_COMMIT_COMMAND,
  DETERMINISTIC_GIT_ENV,
  SWE_MINI_WORKDIR,
  taskImage,
} from '../environments/swe-mini/repository.ts';
import { SWE_MINI_TASKS } from '../environments/swe-mini/tasks.ts';

export const IMAGE_SETS = ['swe-mini'] as const;

/** Who builds images: the daemon's client (`GymClient`), or its image service in-process. */
export interface ImagePreparer {
  prepareImage(request: PrepareImageRequest): Promise<PrepareImageResponse>;
}

/**
 * Builds every swe-mini task image that is missing (and the Debian base under them): each task's
 * files at its base commit, derived from `debian-base` by the daemon's provider. With `only`, just
 * the tasks whose image is in it (a run's rows name theirs), so `--limit 1` builds one.
 */
export async function buildSweMiniImages(
  images: ImagePreparer,
  onImage?: (reference: string, built: boolean) => void,
  only?: ReadonlySet<string>,
): Promise<void> {
  for (const task of SWE_MINI_TASKS) {
    if (only !== undefined && !only.has(taskImage(task))) continue;
    const result = await images.prepareImage({
      kind: 'derived',
      reference: taskImage(task),
      base: 'debian-base',
      workdir: SWE_MINI_WORKDIR,
      files: task.files,
      command: BASE_COMMIT_COMMAND,
      env: DETERMINISTIC_GIT_ENV,
    });
    // The task image is the last; the Debian base comes first when it had to be built.
    const image = result.images.at(-1)!;
    onImage?.(image.reference, image.built);
  }
}
