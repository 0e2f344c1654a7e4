/**
 * `gym image build --context DIR`: a Dockerfile build context (a Harbor task's environment/
 * folder) built on the daemon's provider exactly as `gym eval run` builds a Harbor task's image
 * (environments/kinds/harbor/images.ts): the same Dockerfile subset, the same name and
 * content-hash tag, so both share one image. For plug-ins outside this process (Harbor's
 * environment in python/gym_sandboxd/harbor.py), which find the image by the printed reference.
 * A context with a docker-compose.yaml (a Harbor Compose task) also has its other services'
 * images built, and prints them as the sandbox spec's `services` (environment variables
 * interpolated from this process's environment, as Compose interpolates them from the host's).
 */
import { readFile } from 'node:fs/promises';
import { basename, dirname, join, resolve } from 'node:path';
import type { GymClient } from '../../../client/client.ts';
import { GymError } from '../../../core/errors.ts';
import type { Logger } from '../../../core/logger.ts';
import type { PreparedImage } from '../../../core/schemas/image.ts';
import type { ServiceSpecInput } from '../../../core/schemas/services.ts';
import {
  exists,
  imageRepository,
  imageTagOf,
  linkOutOf,
} from '../../../environments/kinds/harbor/build-context.ts';
import { readHarborCompose } from '../../../environments/kinds/harbor/compose-task.ts';
import { buildDockerfileImage, type ImageClient } from '../../../environments/kinds/harbor/images.ts';
import { composeServiceSpec } from '../../../environments/kinds/harbor/task-directory.ts';

export interface DockerfileBuild {
  /** The build context; its `Dockerfile` is built. */
  context: string;
  /** The image's name (`gym/harbor-<name>`); default the name of the folder holding the context. */
  name?: string | undefined;
  timeoutSeconds?: number | undefined;
  provider?: string | undefined;
  /** What a Compose file's `${VAR}` reads (Compose reads the host's environment). */
  env?: Readonly<Record<string, string | undefined>>;
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
): Promise<PreparedImage & { workdir?: string | undefined; services?: ServiceSpecInput[] }> {
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
  const services = await buildServices(images, build, context, name, reference, logger);
  return {
    name,
    reference,
    built: result.built,
    durationMs: Date.now() - started,
    workdir: info?.workdir,
    ...(services.length === 0 ? {} : { services }),
  };
}

/** The Compose file's other services, their images built (or found), as the sandbox spec takes them. */
async function buildServices(
  images: ImageClient,
  build: DockerfileBuild,
  context: string,
  name: string,
  mainImage: string,
  logger: Logger,
): Promise<ServiceSpecInput[]> {
  const fail = (message: string): never => {
    throw new GymError('VALIDATION_FAILED', message, { details: { context } });
  };
  const compose = await readHarborCompose(dirname(context), name, mainImage, fail);
  const env = build.env ?? {};
  const services: ServiceSpecInput[] = [];
  for (const service of compose?.services ?? []) {
    if (service.build)
      await buildDockerfileImage(
        images,
        {
          dockerfile: await readFile(service.dockerfile!, 'utf8'),
          contextDirectory: service.build_context!,
          reference: service.image,
          ...(build.timeoutSeconds === undefined ? {} : { timeoutSeconds: build.timeoutSeconds }),
        },
        logger,
      );
    else if ((await images.inspectImage(service.image)) === null)
      fail(`service ${service.name}: the image ${service.image} is not on the provider (nothing is pulled)`);
    services.push(composeServiceSpec(service, env, new Set(Object.keys(env))));
  }
  return services;
}
