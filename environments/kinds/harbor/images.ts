/**
 * The images Harbor rows run in: each built from its task's environment/Dockerfile where the
 * Docker engine is (images/dockerfile-image.ts), once per distinct image, before any rollout; a
 * prebuilt `docker_image` must exist already (nothing is pulled).
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type Docker from 'dockerode';
import { GymError } from '../../../core/errors.ts';
import type { Logger } from '../../../core/logger.ts';
import { buildDockerfileImage } from '../../../images/dockerfile-image.ts';

export async function buildHarborImages(
  docker: Docker,
  /** Their `workdir` is set to the image's working directory. */
  rows: ReadonlyArray<Record<string, unknown>>,
  logger: Logger,
  options: {
    /** Makes a built-in base (`debian-base`) a Dockerfile starts FROM when it is missing. */
    prepareBase?: (definition: string) => Promise<void>;
    onImage?: (reference: string, built: boolean, durationMs: number) => void;
  } = {},
): Promise<void> {
  const { onImage } = options;
  const seen = new Set<string>();
  for (const row of rows) {
    const reference = String(row.image);
    if (seen.has(reference)) continue;
    seen.add(reference);
    await prepare(docker, row, reference, logger, options, onImage);
  }
  // The agent and test.sh start where the image says (a prebuilt image's WORKDIR is known only now).
  for (const row of rows) {
    const workdir = (await docker.getImage(String(row.image)).inspect()).Config.WorkingDir;
    if (typeof workdir === 'string' && workdir.startsWith('/')) row.workdir = workdir;
  }
}

async function prepare(
  docker: Docker,
  row: Record<string, unknown>,
  reference: string,
  logger: Logger,
  options: { prepareBase?: (definition: string) => Promise<void> },
  onImage: ((reference: string, built: boolean, durationMs: number) => void) | undefined,
): Promise<void> {
  const started = Date.now();
  if (row.build !== true) {
    const present = await docker
      .getImage(reference)
      .inspect()
      .then(
        () => true,
        () => false,
      );
    if (!present)
      throw new GymError(
        'IMAGE_NOT_FOUND',
        `task ${String(row.id)} names the image "${reference}" (task.toml docker_image), which is not on this machine; nothing is pulled here: load it (docker load -i FILE.tar), or remove docker_image to build environment/Dockerfile`,
        { details: { image: reference } },
      );
    onImage?.(reference, false, 0);
    return;
  }
  const taskDir = String(row.task_dir);
  const result = await buildDockerfileImage(
    docker,
    {
      dockerfile: await readFile(join(taskDir, 'environment', 'Dockerfile'), 'utf8'),
      contextDirectory: join(taskDir, 'environment'),
      reference,
      timeoutMs: Number(row.build_timeout_sec ?? 600) * 1000,
      ...(options.prepareBase === undefined ? {} : { prepareBase: options.prepareBase }),
    },
    logger,
  ).catch((error: unknown) => {
    if (error instanceof GymError)
      throw new GymError(error.code, `task ${String(row.id)} (${taskDir}): ${error.message}`, {
        details: error.details,
        cause: error,
      });
    throw error;
  });
  onImage?.(reference, result.built, Date.now() - started);
}
