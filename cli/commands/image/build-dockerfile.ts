/**
 * `gym image build --context DIR`: a Dockerfile build context (a Harbor task's environment/
 * folder) built on the daemon's provider exactly as `gym eval run` builds a Harbor task's image
 * (environments/kinds/harbor/images.ts): the same Dockerfile subset, the same name and
 * content-hash tag, so both share one image. For plug-ins outside this process (Harbor's
 * environment in python/gym_sandboxd/harbor.py), which find the image by the printed reference.
 */
import { readFile } from 'node:fs/promises';
import { basename, dirname, join, resolve } from 'node:path';
import type { GymClient } from '../../../client/client.ts';
import { GymError } from '../../../core/errors.ts';
import type { Logger } from '../../../core/logger.ts';
import type { PreparedImage } from '../../../core/schemas/image.ts';
import {
  exists,
  imageRepository,
  imageTagOf,
  linkOutOf,
} from '../../../environments/kinds/harbor/build-context.ts';
import { buildDockerfileImage, type ImageClient } from '../../../environments/kinds/harbor/images.ts';

export interface DockerfileBuild {
  /** The build context; its `Dockerfile` is built. */
  context: string;
  /** The image's name (`gym/harbor-<name>`); default the name of the folder holding the context. */
  name?: string | undefined;
  timeoutSeconds?: number | undefined;
  provider?: string | undefined;
}

/** The client's image calls, each on `provider` (the daemon's default when none). */
function onProvider(client: GymClient, provider: string | undefined): ImageClient {
  if (provider === undefined) return client;
  return {
    inspectImage: (reference) => client.inspectImage(reference, { provider }),
    prepareImage: (request, options) => client.prepareImage({ ...request, provider }, options),
    buildImagePlan: (request, archives, options) =>
      client.buildImagePlan({ ...request, provider }, archives, options),
  };
}

/** Builds the context's Dockerfile unless the provider has its image; the image's working directory too. */
export async function buildDockerfileContext(
  client: GymClient,
  build: DockerfileBuild,
  logger: Logger,
): Promise<PreparedImage & { workdir?: string | undefined }> {
  const context = resolve(build.context);
  const dockerfile = join(context, 'Dockerfile');
  if (!(await exists(dockerfile)))
    throw new GymError('VALIDATION_FAILED', `${context} has no Dockerfile`, { details: { context } });
  // A link out of the context would put a host file into the image.
  const linkOut = await linkOutOf(context, `${basename(context)}/`);
  if (linkOut !== undefined) throw new GymError('VALIDATION_FAILED', linkOut, { details: { context } });
  const name = build.name ?? basename(dirname(context));
  const reference = `${imageRepository(name)}:${await imageTagOf(context)}`;
  const images = onProvider(client, build.provider);
  const started = Date.now();
  const result = await buildDockerfileImage(
    images,
    {
      dockerfile: await readFile(dockerfile, 'utf8'),
      contextDirectory: context,
      reference,
      ...(build.timeoutSeconds === undefined ? {} : { timeoutSeconds: build.timeoutSeconds }),
    },
    logger,
  );
  const info = await images.inspectImage(reference);
  return { name, reference, built: result.built, durationMs: Date.now() - started, workdir: info?.workdir };
}
