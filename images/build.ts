/**
 * Builds the project's images without a registry: a root filesystem made on this machine
 * (busybox copied in, or `debootstrap` from the machine's configured Debian mirror), streamed
 * as a tar to the provider, which turns it into what it runs (`prepareImage`, see
 * `core/image-source.ts`; Docker imports it). Nothing here knows the backend.
 */

import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { chmod, copyFile, mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { GymError } from '../core/errors.ts';
import type { ImageConfig, ImageFilter, ImageFormat, ImageInfo, ImageSource } from '../core/image-source.ts';
import type { Logger } from '../core/logger.ts';
import {
  BUILDER_VERSION,
  type BusyboxImageDefinition,
  type DebootstrapImageDefinition,
  IMAGE_REPOSITORY_PREFIX,
  type ImageDefinition,
} from './definitions.ts';

/** Label on every image we build, naming its definition; `gym image ls` filters on it. */
export const IMAGE_DEFINITION_LABEL = 'gym.image-definition';

/**
 * A provider's image part, checked present (`requireImages` in daemon/capabilities.ts makes one
 * from a provider): all the builder needs of a backend.
 */
export interface ImageStore {
  /** The sources the provider accepts. */
  readonly formats: ReadonlyArray<ImageFormat>;
  prepareImage(source: ImageSource): Promise<void>;
  inspectImage(reference: string): Promise<ImageInfo | null>;
  listImages(filter?: ImageFilter): Promise<ImageInfo[]>;
}

/** An image we built, as `gym image ls` shows it. */
export interface ListedImage {
  reference: string;
  definition: string;
  sizeBytes?: number;
  createdAt?: string;
}

export interface BuiltImage {
  name: string;
  reference: string;
  /** False when an image with the same recipe hash already existed. */
  built: boolean;
  durationMs: number;
}

async function sha256File(path: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

/** The recipe hash: the definition, the builder version, and the bytes of any file it copies in. */
export async function imageHash(definition: ImageDefinition): Promise<string> {
  const hash = createHash('sha256');
  hash.update(JSON.stringify({ builderVersion: BUILDER_VERSION, definition }));
  if (definition.kind === 'busybox') {
    try {
      hash.update(await sha256File(definition.busyboxPath));
    } catch {
      throw new GymError(
        'VALIDATION_FAILED',
        `${definition.busyboxPath} is missing: install Debian's busybox-static (see scripts/setup.sh)`,
      );
    }
  }
  return hash.digest('hex').slice(0, 12);
}

export async function imageReference(definition: ImageDefinition): Promise<string> {
  return `${IMAGE_REPOSITORY_PREFIX}${definition.name}:${await imageHash(definition)}`;
}

/** Runs a program, failing with its last lines of output when it exits non-zero. */
function run(command: string, args: string[], logger: Logger): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let tail = '';
    const keep = (chunk: Buffer) => {
      tail = (tail + chunk.toString()).slice(-4000);
      logger.debug({ command }, chunk.toString().trimEnd());
    };
    child.stdout.on('data', keep);
    child.stderr.on('data', keep);
    child.on('error', (error) =>
      reject(
        new GymError(
          'VALIDATION_FAILED',
          `cannot run ${command}: ${error.message} (is it installed? see scripts/setup.sh)`,
        ),
      ),
    );
    child.on('close', (code) =>
      code === 0 ? resolve() : reject(new GymError('INTERNAL', `${command} exited with ${code}:\n${tail}`)),
    );
  });
}

/** The machine's configured Debian mirror, read from APT's sources (deb822 or one-line format). */
export async function configuredDebianMirror(): Promise<string> {
  const candidates = ['/etc/apt/sources.list.d/debian.sources', '/etc/apt/sources.list'];
  for (const path of candidates) {
    const text = await readFile(path, 'utf8').catch(() => '');
    const deb822 = /^URIs:\s*(\S+)/m.exec(text);
    if (deb822?.[1]) return deb822[1];
    const oneLine = /^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+\S+/m.exec(text);
    if (oneLine?.[1]) return oneLine[1];
  }
  throw new GymError('VALIDATION_FAILED', 'no Debian mirror is configured in /etc/apt/sources.list(.d)');
}

/**
 * A definition's Dockerfile-style `changes` (only `ENV K=V`, `WORKDIR DIR` and `CMD [json]`, the
 * forms the definitions use) as a provider-neutral image config. The definition keeps its own
 * form because its recipe hash, and so every image's tag, is computed over it.
 */
export function imageConfig(definition: ImageDefinition): ImageConfig {
  const config: ImageConfig = { env: {}, labels: { [IMAGE_DEFINITION_LABEL]: definition.name } };
  if (definition.kind === 'busybox') return { ...config, cmd: ['/bin/sh'] };
  for (const change of definition.changes) {
    const env = /^ENV ([A-Za-z_][A-Za-z0-9_]*)=(.*)$/.exec(change);
    const workdir = /^WORKDIR (\/\S*)$/.exec(change);
    const cmd = /^CMD (\[.*\])$/.exec(change);
    if (env) config.env[env[1]!] = env[2]!;
    else if (workdir) config.workdir = workdir[1]!;
    else if (cmd) config.cmd = JSON.parse(cmd[1]!) as string[];
    else throw new GymError('INTERNAL', `image ${definition.name}: unsupported change "${change}"`);
  }
  return config;
}

export class ImageBuilder {
  readonly #store: ImageStore;
  readonly #logger: Logger;
  /** Builds under way by reference: a second request for one joins the first. */
  readonly #building = new Map<string, Promise<BuiltImage>>();

  constructor(store: ImageStore, logger: Logger) {
    this.#store = store;
    this.#logger = logger;
  }

  async exists(reference: string): Promise<boolean> {
    return (await this.#store.inspectImage(reference)) !== null;
  }

  /**
   * Builds the image unless one with the same recipe hash exists (or `force`), telling
   * `onProgress` each step (a caller that joins a build under way hears nothing more).
   */
  async build(
    definition: ImageDefinition,
    options: { force?: boolean; onProgress?: (stage: 'rootfs' | 'prepare', message: string) => void } = {},
  ): Promise<BuiltImage> {
    const reference = await imageReference(definition);
    const running = this.#building.get(reference);
    if (running !== undefined) return running;
    const build = this.#build(definition, reference, options.force ?? false, options.onProgress).finally(() =>
      this.#building.delete(reference),
    );
    this.#building.set(reference, build);
    return build;
  }

  async #build(
    definition: ImageDefinition,
    reference: string,
    force: boolean,
    onProgress: ((stage: 'rootfs' | 'prepare', message: string) => void) | undefined,
  ): Promise<BuiltImage> {
    const started = performance.now();
    if (!force && (await this.exists(reference))) {
      return { name: definition.name, reference, built: false, durationMs: 0 };
    }
    if (!this.#store.formats.includes('rootfs')) {
      throw new GymError(
        'CAPABILITY_UNSUPPORTED',
        `the provider cannot prepare an image from a root filesystem (it takes: ${this.#store.formats.join(', ') || 'none'})`,
        { details: { capability: 'imageFormats', format: 'rootfs' } },
      );
    }
    const workDirectory = await mkdtemp(join(tmpdir(), `gym-image-${definition.name}-`));
    const root = join(workDirectory, 'rootfs');
    try {
      onProgress?.(
        'rootfs',
        definition.kind === 'busybox'
          ? 'making the root filesystem from busybox'
          : `making the root filesystem with debootstrap ${definition.suite} (about a minute)`,
      );
      if (definition.kind === 'busybox') await busyboxRoot(definition, root);
      else await this.#debootstrapRoot(definition, root);
      onProgress?.('prepare', `handing the root filesystem to the provider as ${reference}`);
      await this.#store.prepareImage({
        format: 'rootfs',
        reference,
        rootfs: rootfsTar(root),
        config: imageConfig(definition),
        aliases: [`${IMAGE_REPOSITORY_PREFIX}${definition.name}:latest`],
      });
    } finally {
      await rm(workDirectory, { recursive: true, force: true });
    }
    return {
      name: definition.name,
      reference,
      built: true,
      durationMs: Math.round(performance.now() - started),
    };
  }

  async #debootstrapRoot(definition: DebootstrapImageDefinition, root: string): Promise<void> {
    const mirror = await configuredDebianMirror();
    this.#logger.info(
      { image: definition.name, suite: definition.suite },
      'running debootstrap (about a minute)',
    );
    await run(
      'debootstrap',
      [
        `--variant=${definition.variant}`,
        `--include=${definition.include.join(',')}`,
        definition.suite,
        root,
        mirror,
      ],
      this.#logger,
    );
    // Package caches and lists are dead weight in an image that never runs apt against a mirror.
    await run(
      'sh',
      ['-c', `rm -rf "${root}"/var/cache/apt/archives/*.deb "${root}"/var/lib/apt/lists/*`],
      this.#logger,
    );
  }

  /** Images we built, newest first. */
  async list(): Promise<ListedImage[]> {
    const images = await this.#store.listImages({ labelKeys: [IMAGE_DEFINITION_LABEL] });
    return images.map((image) => ({
      reference: image.reference,
      definition: image.labels[IMAGE_DEFINITION_LABEL] ?? '',
      ...(image.sizeBytes === undefined ? {} : { sizeBytes: image.sizeBytes }),
      ...(image.createdAt === undefined ? {} : { createdAt: image.createdAt }),
    }));
  }
}

/** A root filesystem with static busybox, its applets as links, and a root user. */
export async function busyboxRoot(definition: BusyboxImageDefinition, root: string): Promise<void> {
  for (const directory of ['bin', 'tmp', 'etc', 'root', 'proc', 'sys', 'dev', 'usr/bin', 'var/tmp']) {
    await mkdir(join(root, directory), { recursive: true });
  }
  await chmod(join(root, 'tmp'), 0o1777);
  await chmod(join(root, 'var/tmp'), 0o1777);
  await copyFile(definition.busyboxPath, join(root, 'bin/busybox'));
  await chmod(join(root, 'bin/busybox'), 0o755);
  const applets = await new Promise<string[]>((resolve, reject) => {
    const child = spawn(definition.busyboxPath, ['--list'], { stdio: ['ignore', 'pipe', 'inherit'] });
    let text = '';
    child.stdout.on('data', (chunk: Buffer) => {
      text += chunk.toString();
    });
    child.on('error', reject);
    child.on('close', () => resolve(text.split('\n').filter((name) => /^[\w.[-]+$/.test(name))));
  });
  for (const applet of applets) {
    if (applet !== 'busybox') await symlink('busybox', join(root, 'bin', applet));
  }
  await writeFile(
    join(root, 'etc/passwd'),
    'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n',
  );
  await writeFile(join(root, 'etc/group'), 'root:x:0:\nnogroup:x:65534:\n');
}

/**
 * A directory as a tar stream (numeric owners). The stream ends only when tar succeeded; when
 * tar fails it errors instead, so a provider never stores a truncated filesystem as complete.
 */
export function rootfsTar(root: string): PassThrough {
  const output = new PassThrough();
  const tarProcess = spawn('tar', ['--numeric-owner', '-C', root, '-c', '.'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let tarErrors = '';
  tarProcess.stderr.on('data', (chunk: Buffer) => {
    tarErrors = (tarErrors + chunk.toString()).slice(-2000);
  });
  tarProcess.stdout.pipe(output, { end: false });
  tarProcess.on('error', (error) =>
    output.destroy(new GymError('INTERNAL', `cannot run tar: ${error.message}`)),
  );
  tarProcess.on('close', (code) => {
    if (code === 0) output.end();
    else output.destroy(new GymError('INTERNAL', `tar exited with ${code}: ${tarErrors}`));
  });
  return output;
}
