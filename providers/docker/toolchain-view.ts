/**
 * The toolchain check on Docker, from the engine's side (nothing runs in the sandbox): the
 * container's changes against its image (read from its overlay2 folders when the daemon runs
 * beside the engine and can read them, else the engine's `GET /containers/{id}/changes`, which
 * can cost a walk of the whole image), stats and file reads of the
 * container through the archive endpoints, which the engine serves from the host's view of the
 * container's root filesystem, and the same reads of the pristine image through a container of
 * the image that is created but never started (removed at once; labelled like a build container
 * so that a daemon dying mid-check leaves nothing a sweep would not remove).
 */

import type { Readable } from 'node:stream';
import type Docker from 'dockerode';
import type { Clock } from '../../core/clock.ts';
import { GymError } from '../../core/errors.ts';
import type { ToolchainCheckResult } from '../../core/schemas/toolchain.ts';
import { firstEntry } from '../shared/archive.ts';
import {
  type ChangeScope,
  changesInScope,
  type Fingerprint,
  findToolchainTampering,
  type PathChange,
  type PathStat,
  sha256Of,
  type ToolchainView,
} from '../shared/toolchain-rules.ts';
import { engineStatus, wrapDockerError } from './docker-errors.ts';
import { BUILD_DEADLINE_LABEL, BUILD_LABEL, buildContainerName } from './docker-images.ts';
import { type OverlayFolders, overlayChanges, overlayFolders, upperFingerprint } from './overlay-changes.ts';

/** The PATH a command gets when the image sets none (Docker's own default). */
const DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';
/** Kernel filesystems no change list shows, whatever the container's mounts. */
const ALWAYS_UNSEEN = ['/dev', '/proc', '/sys'];
/** How long a pristine view may outlive a daemon that died mid-check before a sweep removes it. */
const VIEW_DEADLINE_MS = 10 * 60_000;
/** Image-side fingerprints kept across checks (images are immutable by id). */
const MAX_CACHED_FINGERPRINTS = 8192;

/** Small image files kept (a loader cache is tens of KiB), and how many. */
const MAX_CACHED_FILE_BYTES = 1024 * 1024;
const MAX_CACHED_FILES = 64;

const CHANGE_KINDS: Record<number, PathChange['change']> = { 0: 'modified', 1: 'added', 2: 'removed' };

interface EngineStat {
  mode: number;
  size: number;
  linkTarget?: string;
}

/** Go's os.FileMode type bits, as the engine's path stat carries them. */
function statType(mode: number): PathStat['type'] {
  if ((mode & 0x80000000) !== 0) return 'directory';
  if ((mode & 0x08000000) !== 0) return 'symlink';
  // Any other type bit (device, pipe, socket, irregular).
  return (mode & 0x7ff00000) === 0 ? 'file' : 'other';
}

async function engineStat(container: Docker.Container, path: string): Promise<EngineStat | null> {
  try {
    const response = (await container.infoArchive({ path })) as unknown as Readable & {
      headers: Record<string, string | undefined>;
    };
    response.resume();
    const header = response.headers['x-docker-container-path-stat'];
    if (header === undefined) return null;
    return JSON.parse(Buffer.from(header, 'base64').toString('utf8')) as EngineStat;
  } catch (error) {
    if (engineStatus(error) === 404) return null;
    throw error;
  }
}

async function engineFingerprint(container: Docker.Container, path: string): Promise<Fingerprint | null> {
  const stat = await engineStat(container, path);
  if (stat === null) return null;
  const type = statType(stat.mode);
  if (type === 'directory') return { type, mode: stat.mode & 0o7777 };
  const { header, content } = await firstEntry((await container.getArchive({ path })) as unknown as Readable);
  return {
    type: content !== null ? 'file' : header.type === 'symlink' ? 'symlink' : 'other',
    mode: (header.mode ?? 0) & 0o7777,
    ...(header.type === 'symlink' ? { linkname: header.linkname ?? '' } : {}),
    ...(content === null ? {} : { sha256: await sha256Of(content) }),
  };
}

async function engineRead(
  container: Docker.Container,
  path: string,
  maxBytes: number,
): Promise<Buffer | null> {
  const stat = await engineStat(container, path);
  if (stat === null || statType(stat.mode) !== 'file') return null;
  if (stat.size > maxBytes) throw new Error(`${path} is larger than ${maxBytes} bytes`);
  const { content } = await firstEntry((await container.getArchive({ path })) as unknown as Readable);
  if (content === null) return null;
  const chunks: Buffer[] = [];
  for await (const chunk of content) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

/**
 * The engine's change list. dockerode leaves the body unparsed when it is `null` (no change at
 * all); anything but a list or null is an error, never "nothing changed".
 */
function engineChanges(answer: unknown, sandboxId: string): Array<{ Path: string; Kind: number }> {
  const parsed = Buffer.isBuffer(answer) || typeof answer === 'string' ? safeJson(answer.toString()) : answer;
  if (parsed === null) return [];
  if (
    Array.isArray(parsed) &&
    parsed.every((entry) => typeof entry?.Path === 'string' && typeof entry?.Kind === 'number')
  )
    return parsed;
  throw new GymError('PROVIDER_ERROR', `the engine's change list of sandbox ${sandboxId} is not a list`, {
    details: { sandboxId },
  });
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

export class DockerToolchainCheck {
  readonly #docker: Docker;
  readonly #clock: Clock;
  /** `imageId\0path` to the image's fingerprint of that path. */
  readonly #imageFingerprints = new Map<string, Fingerprint | null>();
  /** `imageId\0path` to a small file of the image (its loader configuration). */
  readonly #imageFiles = new Map<string, Buffer | null>();
  /** `imageId\0path` to the image's stat of that path. */
  readonly #imageStats = new Map<string, PathStat | null>();

  /** Whether to read overlay2 layer folders on this host when it can (false: always ask the engine). */
  readonly #useOverlayFolders: boolean;

  constructor(docker: Docker, clock: Clock, options: { useOverlayFolders?: boolean } = {}) {
    this.#docker = docker;
    this.#clock = clock;
    this.#useOverlayFolders = options.useOverlayFolders ?? true;
  }

  /**
   * The container's changes inside a scope: from its overlay folders when this host can read them
   * (only the scope is read), else the engine's list (which lists everything) cut to the scope.
   */
  async #changes(
    container: Docker.Container,
    folders: OverlayFolders | null,
    sandboxId: string,
    scope: ChangeScope,
    limit: number,
  ): Promise<PathChange[] | null> {
    if (folders !== null) return overlayChanges(folders, scope, limit);
    const all = engineChanges(await container.changes(), sandboxId).flatMap((entry) => {
      const change = CHANGE_KINDS[entry.Kind];
      return change === undefined ? [] : [{ path: entry.Path, change }];
    });
    return changesInScope(all, scope, limit);
  }

  /** The image's stat of a path: the same for every sandbox of the image, so kept. */
  async #imageStat(
    imageId: string,
    path: string,
    image: () => Promise<Docker.Container>,
  ): Promise<PathStat | null> {
    const key = `${imageId}\0${path}`;
    const known = this.#imageStats.get(key);
    if (known !== undefined) return known;
    const stat = await engineStat(await image(), path);
    const type = stat === null ? null : statType(stat.mode);
    const answer =
      type === null
        ? null
        : type === 'symlink' && stat?.linkTarget !== undefined
          ? { type, resolved: stat.linkTarget }
          : { type };
    if (this.#imageStats.size >= MAX_CACHED_FINGERPRINTS) this.#imageStats.clear();
    this.#imageStats.set(key, answer);
    return answer;
  }

  /** The check for one container (see `SandboxProvider.checkToolchain`). */
  async check(
    container: Docker.Container,
    sandboxId: string,
    tools: ReadonlyArray<string>,
    workdirs: ReadonlyArray<string> = [],
  ): Promise<ToolchainCheckResult> {
    const started = performance.now();
    let info: Docker.ContainerInspectInfo;
    let folders: OverlayFolders | null;
    try {
      info = await container.inspect();
      folders = this.#useOverlayFolders ? await overlayFolders(info.GraphDriver) : null;
    } catch (error) {
      throw wrapDockerError(error, { operation: 'toolchain check', sandboxId });
    }
    const pathVariable =
      (info.Config.Env ?? []).find((entry) => entry.startsWith('PATH='))?.slice('PATH='.length) ??
      DEFAULT_PATH;
    const mounts = (info.Mounts ?? []).map((mount) => mount.Destination);
    let pristine: Promise<Docker.Container> | undefined;
    const image = () => {
      pristine ??= this.#docker.createContainer({
        // Named as a build container, so a daemon's start removes it past its deadline if this
        // daemon died holding it.
        name: buildContainerName(),
        Image: info.Image,
        // Never started: the command is only what the engine needs to create it.
        Entrypoint: ['/gym-toolchain-view-never-started'],
        Cmd: [],
        NetworkDisabled: true,
        Labels: {
          'gym.role': 'toolchain-view',
          [BUILD_LABEL]: `toolchain-view:${info.Image}`,
          [BUILD_DEADLINE_LABEL]: String(this.#clock.now() + VIEW_DEADLINE_MS),
        },
        HostConfig: { NetworkMode: 'none', LogConfig: { Type: 'none', Config: {} } },
      });
      return pristine;
    };
    // Every change listed, over all the scopes the rules ask for (what the result reports).
    let changedPaths = 0;
    const view: ToolchainView = {
      listChanges: async (scope, limit) => {
        const listed = await this.#changes(container, folders, sandboxId, scope, limit);
        changedPaths += listed?.length ?? limit;
        return listed;
      },
      pathDirectories: pathVariable.split(':'),
      unseenFolders: [...ALWAYS_UNSEEN, ...mounts],
      stat: async (path, side) => {
        if (side === 'image') return this.#imageStat(info.Image, path, image);
        const stat = await engineStat(container, path);
        if (stat === null) return null;
        const type = statType(stat.mode);
        return type === 'symlink' && stat.linkTarget !== undefined
          ? { type, resolved: stat.linkTarget }
          : { type };
      },
      fingerprint: async (path, side) => {
        if (side === 'live')
          return (
            (folders === null ? null : await upperFingerprint(folders, path, sha256Of)) ??
            engineFingerprint(container, path)
          );
        const key = `${info.Image}\0${path}`;
        if (this.#imageFingerprints.has(key)) return this.#imageFingerprints.get(key) ?? null;
        const fingerprint = await engineFingerprint(await image(), path);
        if (this.#imageFingerprints.size >= MAX_CACHED_FINGERPRINTS) this.#imageFingerprints.clear();
        this.#imageFingerprints.set(key, fingerprint);
        return fingerprint;
      },
      read: async (path, side, maxBytes) => {
        if (side === 'live') return engineRead(container, path, maxBytes);
        const key = `${info.Image}\0${path}`;
        const known = this.#imageFiles.get(key);
        if (known !== undefined && (known === null || known.length <= maxBytes)) return known;
        const bytes = await engineRead(await image(), path, maxBytes);
        if (bytes === null || bytes.length <= MAX_CACHED_FILE_BYTES) {
          if (this.#imageFiles.size >= MAX_CACHED_FILES) this.#imageFiles.clear();
          this.#imageFiles.set(key, bytes);
        }
        return bytes;
      },
    };
    try {
      const tampered = await findToolchainTampering(view, tools, workdirs);
      return { tampered, changedPaths, durationMs: performance.now() - started };
    } catch (error) {
      throw wrapDockerError(error, { operation: 'toolchain check', sandboxId });
    } finally {
      if (pristine !== undefined)
        await pristine.then(
          (made) => made.remove({ force: true }).catch(() => {}),
          () => {},
        );
    }
  }
}
