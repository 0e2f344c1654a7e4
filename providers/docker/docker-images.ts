/**
 * The Docker provider's image part (`prepareImage`, `inspectImage`, `listImages`): a root
 * filesystem becomes an image through the engine's import endpoint (`docker import`), a derived
 * image through a container of its base that gets the files and the command and is committed.
 * Nothing here needs a registry.
 */
import { PassThrough, type Readable } from 'node:stream';
import type Docker from 'dockerode';
import * as tar from 'tar-stream';
import { GymError } from '../../core/errors.ts';
import type { Logger } from '../../core/logger.ts';
import type {
  DerivedImageSource,
  ImageConfig,
  ImageFilter,
  ImageInfo,
  ImageSource,
  RootfsImageSource,
} from '../sandbox-provider.ts';
import { engineStatus, wrapDockerError } from './docker-errors.ts';

/** `repo:tag` split at the tag's colon (a registry host's port colon comes before a slash). */
export function splitReference(reference: string): { repo: string; tag: string } {
  const separator = reference.lastIndexOf(':');
  const hasTag = separator > reference.lastIndexOf('/');
  return hasTag
    ? { repo: reference.slice(0, separator), tag: reference.slice(separator + 1) }
    : { repo: reference, tag: 'latest' };
}

/** An image config as the Dockerfile instructions the import and commit endpoints take. */
export function dockerfileChanges(config: Partial<ImageConfig>): string[] {
  return [
    ...Object.entries(config.env ?? {}).map(([name, value]) => `ENV ${name}=${JSON.stringify(value)}`),
    ...(config.workdir === undefined ? [] : [`WORKDIR ${config.workdir}`]),
    ...(config.cmd === undefined ? [] : [`CMD ${JSON.stringify(config.cmd)}`]),
    ...Object.entries(config.labels ?? {}).map(([name, value]) => `LABEL ${name}=${JSON.stringify(value)}`),
  ];
}

function filesTar(files: Record<string, string>): Readable {
  const pack = tar.pack();
  for (const [path, content] of Object.entries(files)) pack.entry({ name: path, mode: 0o644 }, content);
  pack.finalize();
  return pack as unknown as Readable;
}

/**
 * How long the container of a derived image lives at most: it removes itself when its keeper
 * ends, so a daemon killed mid-build leaves nothing behind for longer than this.
 */
const DERIVE_KEEPER_SECONDS = 600;

export class DockerImages {
  readonly #docker: Docker;
  readonly #logger: Logger;

  constructor(docker: Docker, logger: Logger) {
    this.#docker = docker;
    this.#logger = logger;
  }

  async inspect(reference: string): Promise<ImageInfo | null> {
    try {
      const image = await this.#docker.getImage(reference).inspect();
      return {
        reference,
        labels: image.Config?.Labels ?? {},
        sizeBytes: image.Size,
        createdAt: new Date(image.Created).toISOString(),
      };
    } catch (error) {
      if (engineStatus(error) === 404) return null;
      throw wrapDockerError(error, { operation: 'inspect image', image: reference });
    }
  }

  async list(filter: ImageFilter = {}): Promise<ImageInfo[]> {
    let images: Docker.ImageInfo[];
    try {
      images = await this.#docker.listImages(
        filter.labelKeys === undefined || filter.labelKeys.length === 0
          ? {}
          : { filters: { label: filter.labelKeys } },
      );
    } catch (error) {
      throw wrapDockerError(error, { operation: 'list images' });
    }
    return images
      .flatMap((image) =>
        (image.RepoTags ?? [])
          .filter((reference) => reference !== '<none>:<none>')
          .map((reference) => ({
            reference,
            labels: image.Labels ?? {},
            sizeBytes: image.Size,
            createdAt: new Date(image.Created * 1000).toISOString(),
          })),
      )
      .sort(
        (left, right) =>
          right.createdAt.localeCompare(left.createdAt) || left.reference.localeCompare(right.reference),
      );
  }

  async prepare(source: ImageSource): Promise<void> {
    if (source.format === 'rootfs') await this.#import(source);
    else if (source.format === 'derived') await this.#derive(source);
    else {
      throw new GymError(
        'CAPABILITY_UNSUPPORTED',
        `the docker provider cannot prepare images of format "${(source as { format: string }).format}"`,
        { details: { provider: 'docker', capability: 'imageFormats' } },
      );
    }
  }

  /** `docker import`: the tar stream goes straight into the engine, the config as Dockerfile changes. */
  async #import(source: RootfsImageSource): Promise<void> {
    const { repo, tag } = splitReference(source.reference);
    try {
      const response = (await this.#docker.importImage(
        source.rootfs as never,
        { repo, tag, changes: dockerfileChanges(source.config) } as never,
      )) as unknown as Readable;
      await new Promise<void>((resolve, reject) => {
        this.#docker.modem.followProgress(
          response,
          (error: Error | null, events: Array<{ error?: string }>) => {
            const failed = events?.find((event) => event.error);
            if (error || failed)
              reject(
                new GymError('PROVIDER_ERROR', `image import failed: ${error?.message ?? failed?.error}`),
              );
            else resolve();
          },
        );
      });
      for (const alias of source.aliases ?? []) {
        await this.#docker.getImage(source.reference).tag(splitReference(alias));
      }
    } catch (error) {
      throw wrapDockerError(error, { operation: 'import image', image: source.reference });
    }
  }

  /**
   * A container of the base (no network, no log), the files written, the command run, the
   * container committed under the reference with the labels added.
   */
  async #derive(source: DerivedImageSource): Promise<void> {
    let container: Docker.Container;
    try {
      container = await this.#docker.createContainer({
        Image: source.base,
        Entrypoint: ['sh', '-c', `sleep ${DERIVE_KEEPER_SECONDS}`],
        Cmd: [],
        WorkingDir: source.workdir,
        HostConfig: { NetworkMode: 'none', AutoRemove: true, LogConfig: { Type: 'none', Config: {} } },
      });
    } catch (error) {
      throw wrapDockerError(error, { operation: 'derive image', image: source.base });
    }
    try {
      await container.start();
      await this.#run(container, `mkdir -p '${source.workdir.replaceAll("'", `'\\''`)}'`, '/', {});
      await container.putArchive(filesTar(source.files), { path: source.workdir });
      await this.#run(container, source.command, source.workdir, source.env);
      const { repo, tag } = splitReference(source.reference);
      await container.commit({ repo, tag, changes: dockerfileChanges({ labels: source.labels }) } as never);
    } catch (error) {
      throw wrapDockerError(error, { operation: 'derive image', image: source.reference });
    } finally {
      await container.remove({ force: true }).catch((error: unknown) => {
        if (engineStatus(error) !== 404 && engineStatus(error) !== 409)
          this.#logger.warn({ error: String(error) }, 'could not remove the container of a derived image');
      });
    }
  }

  async #run(
    container: Docker.Container,
    command: string,
    workdir: string,
    env: Record<string, string>,
  ): Promise<void> {
    const exec = await container.exec({
      Cmd: ['sh', '-c', command],
      WorkingDir: workdir,
      Env: Object.entries(env).map(([key, value]) => `${key}=${value}`),
      AttachStdout: true,
      AttachStderr: true,
    });
    const stream = (await exec.start({ hijack: true, stdin: false })) as unknown as Readable;
    const output = new PassThrough();
    let tail = '';
    output.on('data', (chunk: Buffer) => {
      tail = (tail + chunk.toString('utf8')).slice(-2000);
    });
    this.#docker.modem.demuxStream(stream, output, output);
    await new Promise<void>((resolve) => {
      stream.once('end', resolve);
      stream.once('close', resolve);
    });
    const { ExitCode } = await exec.inspect();
    if (ExitCode !== 0) {
      throw new GymError(
        'VALIDATION_FAILED',
        `the image's command failed with exit ${ExitCode} (${command}): ${tail}`,
        { details: { command, exitCode: ExitCode } },
      );
    }
  }
}
