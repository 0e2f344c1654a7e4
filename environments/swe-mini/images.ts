/**
 * The swe-mini image set (`"images": "swe-mini"` in an environment.json): each task's repository
 * at its base commit, derived from `debian-base` by the daemon's provider. Built by the `swe`
 * kind before a run (`prepareImages`) and by `gym image build swe-mini`.
 */
import type { PrepareImageRequest, PrepareImageResponse } from '../../core/schemas/image.ts';
import { BASE_COMMIT_COMMAND, DETERMINISTIC_GIT_ENV, SWE_MINI_WORKDIR, taskImage } from './repository.ts';
import { SWE_MINI_TASKS } from './tasks.ts';

/** The name environments give this image set. */
export const SWE_MINI_IMAGE_SET = 'swe-mini';

/** Who builds images: the daemon's client (`GymClient`), or its image service in-process. */
export interface ImagePreparer {
  prepareImage(request: PrepareImageRequest): Promise<PrepareImageResponse>;
}

/**
 * Builds every swe-mini task image that is missing (and the Debian base under them). With
 * `only`, just the tasks whose image is in it (a run's rows name theirs), so `--limit 1` builds
 * one.
 */
export async function buildSweMiniImages(
  images: ImagePreparer,
  onImage?: (reference: string, built: boolean, durationMs: number) => void,
  only?: ReadonlySet<string>,
  onStart?: (reference: string, index: number, total: number) => void,
): Promise<void> {
  const tasks = SWE_MINI_TASKS.filter((task) => only === undefined || only.has(taskImage(task)));
  for (const [index, task] of tasks.entries()) {
    onStart?.(taskImage(task), index, tasks.length);
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
    onImage?.(image.reference, image.built, image.durationMs);
  }
}
