/**
 * Where a missing image may come from, when the operator says so: a folder of `docker save`
 * tarballs (SWE-bench's images, built on a machine with network and carried here), or a
 * registry mirror the operator runs. Nothing is ever pulled unless a mirror is configured, and
 * only from it; without a setting a missing image stays a clear IMAGE_NOT_FOUND.
 *
 * A tarball is found by the image's name: for `swebench/sweb.eval.x86_64.django_1776_django-11099:latest`
 * the folder is searched, in this order, for `swebench_sweb.eval.x86_64.django_1776_django-11099_latest.tar`
 * (every `/` and `:` of the reference as `_`), then, for the tag `latest` only, the same without
 * `_latest`, then the last part of the name alone (`sweb.eval.x86_64.django_1776_django-11099.tar`);
 * each also as `.tar.gz`. The tarball must hold the image under that reference (what `docker save
 * <reference>` writes); it is loaded once, however many sandboxes asked for it at once.
 */
import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import type Docker from 'dockerode';
import { z } from 'zod';
import { GymError } from '../../core/errors.ts';
import type { Logger } from '../../core/logger.ts';
import { wrapDockerError } from './docker-errors.ts';

export const ImageSourcesSchema = z
  .object({
    /** A folder of `docker save` tarballs, each named by the image it holds (see above). */
    tarballDirectory: z.string().min(1).optional(),
    /**
     * A registry the operator runs, as `host[:port][/path]` (no scheme): a missing `name:tag` is
     * pulled as `<mirror>/name:tag` and tagged `name:tag`. A name that starts with a registry
     * host has that host replaced by the mirror.
     */
    registryMirror: z
      .string()
      .regex(/^[A-Za-z0-9.-]+(:[0-9]{1,5})?(\/[a-z0-9._/-]+)?$/, {
        message: 'must be host[:port][/path], without a scheme',
      })
      .optional(),
  })
  .strict();
export type ImageSourcesOptions = z.output<typeof ImageSourcesSchema>;

/** `name` and `tag` of a reference (`latest` when it names none); a digest reference is never fetched. */
function splitReference(reference: string): { name: string; tag: string } | null {
  if (reference.includes('@')) return null;
  const slash = reference.lastIndexOf('/');
  const colon = reference.lastIndexOf(':');
  return colon > slash
    ? { name: reference.slice(0, colon), tag: reference.slice(colon + 1) }
    : { name: reference, tag: 'latest' };
}

/** Whether the first part of a name is a registry host (it has a dot or a port, or is localhost). */
function hasRegistryHost(name: string): boolean {
  const first = name.split('/')[0]!;
  return name.includes('/') && (first.includes('.') || first.includes(':') || first === 'localhost');
}

/** The tarball names tried for a reference, in order (each `.tar`, then `.tar.gz`). */
export function tarballNames(reference: string): string[] {
  const parts = splitReference(reference);
  if (parts === null) return [];
  const flat = (text: string) => text.replaceAll('/', '_').replaceAll(':', '_');
  const stems = [flat(`${parts.name}:${parts.tag}`)];
  if (parts.tag === 'latest') stems.push(flat(parts.name));
  const last = parts.name.split('/').at(-1)!;
  stems.push(parts.tag === 'latest' ? last : `${last}_${flat(parts.tag)}`);
  // A row names the image: only plain file names, never a path out of the folder.
  return [...new Set(stems)]
    .filter((stem) => /^[A-Za-z0-9][A-Za-z0-9._-]*$/.test(stem))
    .flatMap((stem) => [`${stem}.tar`, `${stem}.tar.gz`]);
}

/** The mirror's reference of an image, or null for one it cannot name (a digest). */
export function mirrorReference(mirror: string, reference: string): string | null {
  const parts = splitReference(reference);
  if (parts === null) return null;
  const path = hasRegistryHost(parts.name) ? parts.name.split('/').slice(1).join('/') : parts.name;
  return `${mirror}/${path}:${parts.tag}`;
}

export class ImageSources {
  readonly #docker: Docker;
  readonly #options: ImageSourcesOptions;
  readonly #logger: Logger;
  /** Fetches under way, by reference: concurrent creates of one missing image wait for one load. */
  readonly #fetching = new Map<string, Promise<boolean>>();

  constructor(docker: Docker, options: ImageSourcesOptions, logger: Logger) {
    this.#docker = docker;
    this.#options = options;
    this.#logger = logger;
  }

  /**
   * Creates the container; an image missing from the engine is first fetched from the configured
   * image sources (once), else it is IMAGE_NOT_FOUND naming where it was looked for.
   */
  async createContainer(image: string, options: Docker.ContainerCreateOptions): Promise<Docker.Container> {
    try {
      return await this.#docker.createContainer(options);
    } catch (error) {
      const wrapped = wrapDockerError(error, { operation: 'create', image });
      if (wrapped.code !== 'IMAGE_NOT_FOUND' || !this.isConfigured) throw wrapped;
      if (!(await this.fetch(image)))
        throw new GymError(
          'IMAGE_NOT_FOUND',
          `${wrapped.message}; the configured image sources have none: ${this.describe(image)}`,
          {
            details: { ...wrapped.details, image, imageSources: this.describe(image) },
            cause: error,
          },
        );
    }
    return this.#docker.createContainer(options);
  }

  get isConfigured(): boolean {
    return this.#options.tarballDirectory !== undefined || this.#options.registryMirror !== undefined;
  }

  /**
   * Brings a missing image onto the engine from the configured sources: true when it is there now,
   * false when no source has it. A source that has it but fails (a tarball that does not hold the
   * reference, a mirror that refuses) throws, naming the source.
   */
  fetch(reference: string): Promise<boolean> {
    const running = this.#fetching.get(reference);
    if (running !== undefined) return running;
    const fetching = this.#fetch(reference).finally(() => this.#fetching.delete(reference));
    this.#fetching.set(reference, fetching);
    return fetching;
  }

  /** Where the sources were looked in, for an IMAGE_NOT_FOUND message. */
  describe(reference: string): string {
    const places: string[] = [];
    if (this.#options.tarballDirectory !== undefined)
      places.push(`no tarball in ${this.#options.tarballDirectory} (${tarballNames(reference).join(', ')})`);
    if (this.#options.registryMirror !== undefined)
      places.push(`not on the mirror ${this.#options.registryMirror}`);
    return places.join('; ');
  }

  async #fetch(reference: string): Promise<boolean> {
    const directory = this.#options.tarballDirectory;
    if (directory !== undefined) {
      for (const name of tarballNames(reference)) {
        const path = join(directory, name);
        const found = await stat(path).then(
          (info) => info.isFile(),
          () => false,
        );
        if (!found) continue;
        await this.#load(path, reference);
        return true;
      }
    }
    const mirror = this.#options.registryMirror;
    if (mirror !== undefined) {
      const remote = mirrorReference(mirror, reference);
      if (remote !== null && (await this.#pull(remote, reference))) return true;
    }
    return false;
  }

  async #load(path: string, reference: string): Promise<void> {
    const started = Date.now();
    try {
      const stream = await this.#docker.loadImage(createReadStream(path));
      await new Promise<void>((resolve, reject) =>
        this.#docker.modem.followProgress(stream, (error) => (error ? reject(error) : resolve())),
      );
    } catch (error) {
      throw wrapDockerError(error, { operation: `load ${path}`, image: reference });
    }
    if (!(await this.#exists(reference)))
      throw new GymError(
        'IMAGE_NOT_FOUND',
        `${path} was loaded but holds no image "${reference}" (save it with \`docker save ${reference}\`, which keeps its name)`,
        { details: { image: reference, tarball: path } },
      );
    this.#logger.info({ image: reference, tarball: path, durationMs: Date.now() - started }, 'image loaded');
  }

  /** Pulls from the mirror and tags the result; false when the mirror has no such image. */
  async #pull(remote: string, reference: string): Promise<boolean> {
    const started = Date.now();
    try {
      const stream = await this.#docker.pull(remote);
      await new Promise<void>((resolve, reject) =>
        this.#docker.modem.followProgress(stream, (error) => (error ? reject(error) : resolve())),
      );
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      // The engine answers 404 (or "not found" / "manifest unknown" in the stream) for a missing image.
      if (
        (error as { statusCode?: number }).statusCode === 404 ||
        /not found|manifest unknown/i.test(message)
      )
        return false;
      throw new GymError('PROVIDER_ERROR', `pulling ${remote} from the registry mirror failed: ${message}`, {
        details: { image: reference, remote },
        cause: error,
      });
    }
    const parts = splitReference(reference)!;
    try {
      await this.#docker.getImage(remote).tag({ repo: parts.name, tag: parts.tag });
    } catch (error) {
      throw wrapDockerError(error, { operation: 'tag pulled image', image: reference });
    }
    this.#logger.info(
      { image: reference, remote, durationMs: Date.now() - started },
      'image pulled from the mirror',
    );
    return true;
  }

  async #exists(reference: string): Promise<boolean> {
    return this.#docker
      .getImage(reference)
      .inspect()
      .then(
        () => true,
        () => false,
      );
  }
}
