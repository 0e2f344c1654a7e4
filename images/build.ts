/**
 * Builds the project's images without a registry: a root filesystem made on this machine
 * (busybox copied in, or `debootstrap` from the machine's configured Debian mirror), streamed
 * as a tar into the engine's import endpoint.
 */

import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { chmod, copyFile, mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import type Docker from 'dockerode';
import { GymError } from '../core/errors.ts';
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

export class ImageBuilder {
  readonly #docker: Docker;
  readonly #logger: Logger;

  constructor(docker: Docker, logger: Logger) {
    this.#docker = docker;
    this.#logger = logger;
  }

  async exists(reference: string): Promise<boolean> {
    try {
      await this.#docker.getImage(reference).inspect();
      return true;
    } catch {
      return false;
    }
  }

  /** Builds the image unless one with the same recipe hash exists (or `force`). */
  async build(definition: ImageDefinition, options: { force?: boolean } = {}): Promise<BuiltImage> {
    const started = performance.now();
    const reference = await imageReference(definition);
    if (!options.force && (await this.exists(reference))) {
      return { name: definition.name, reference, built: false, durationMs: 0 };
    }
    const workDirectory = await mkdtemp(join(tmpdir(), `gym-image-${definition.name}-`));
    const root = join(workDirectory, 'rootfs');
    try {
      if (definition.kind === 'busybox') await this.#busyboxRoot(definition, root);
      else await this.#debootstrapRoot(definition, root);
      const changes = [
        ...(definition.kind === 'debootstrap' ? definition.changes : ['CMD ["/bin/sh"]']),
        `LABEL ${IMAGE_DEFINITION_LABEL}=${definition.name}`,
      ];
      await this.#import(root, reference, changes);
      await this.#docker
        .getImage(reference)
        .tag({ repo: `${IMAGE_REPOSITORY_PREFIX}${definition.name}`, tag: 'latest' });
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

  async #busyboxRoot(definition: BusyboxImageDefinition, root: string): Promise<void> {
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

  async #import(root: string, reference: string, changes: string[]): Promise<void> {
    const [repo, tag] = [
      reference.slice(0, reference.lastIndexOf(':')),
      reference.slice(reference.lastIndexOf(':') + 1),
    ];
    const tarProcess = spawn('tar', ['--numeric-owner', '-C', root, '-c', '.'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let tarErrors = '';
    tarProcess.stderr.on('data', (chunk: Buffer) => {
      tarErrors = (tarErrors + chunk.toString()).slice(-2000);
    });
    const tarExit = new Promise<number | null>((resolve) => tarProcess.on('close', resolve));
    const response = (await this.#docker.importImage(
      tarProcess.stdout as unknown as Readable as never,
      {
        repo,
        tag,
        changes,
      } as never,
    )) as unknown as Readable;
    await new Promise<void>((resolve, reject) => {
      this.#docker.modem.followProgress(
        response,
        (error: Error | null, events: Array<{ error?: string }>) => {
          const failed = events?.find((event) => event.error);
          if (error || failed)
            reject(new GymError('PROVIDER_ERROR', `image import failed: ${error?.message ?? failed?.error}`));
          else resolve();
        },
      );
    });
    const code = await tarExit;
    if (code !== 0) throw new GymError('INTERNAL', `tar exited with ${code}: ${tarErrors}`);
  }

  /** Images we built, newest first. */
  async list(): Promise<
    Array<{ reference: string; definition: string; sizeBytes: number; createdAt: string }>
  > {
    const images = await this.#docker.listImages({ filters: { label: [IMAGE_DEFINITION_LABEL] } });
    return images
      .flatMap((image) =>
        (image.RepoTags ?? [])
          .filter((reference) => reference !== '<none>:<none>')
          .map((reference) => ({
            reference,
            definition: image.Labels?.[IMAGE_DEFINITION_LABEL] ?? '',
            sizeBytes: image.Size,
            createdAt: new Date(image.Created * 1000).toISOString(),
          })),
      )
      .sort(
        (left, right) =>
          right.createdAt.localeCompare(left.createdAt) || left.reference.localeCompare(right.reference),
      );
  }
}
