/**
 * Managed snapshots (docs/snapshots.md): a sandbox's files kept under an id specs name as
 * `snapshot:<id>`, made the provider's own way (`native`, the `snapshot` capability) or, for any
 * provider, as the archive of `providers/shared/archive-snapshot.ts` kept in the daemon's state
 * directory. This service makes them within the configured limits, resolves a spec's
 * `snapshot:<id>` at create (the lifecycle calls it through {@link SpecImageResolver}), reaps them
 * after their TTL (never while a pool's spec starts from one), and drops those whose content is
 * gone.
 */
import { readdir, rm, stat } from 'node:fs/promises';
import { basename, join } from 'node:path';
import type { Clock } from '../../core/clock.ts';
import { GymError } from '../../core/errors.ts';
import { createId } from '../../core/ids.ts';
import type { Logger } from '../../core/logger.ts';
import type { SandboxSpec } from '../../core/schemas/sandbox.ts';
import { parseSnapshotRef, type SnapshotInfo, snapshotRef } from '../../core/schemas/snapshot.ts';
import type { SandboxProvider, SnapshotOptions } from '../../providers/sandbox-provider.ts';
import {
  captureArchiveSnapshot,
  removeArchiveSnapshot,
  replayArchiveSnapshot,
} from '../../providers/shared/archive-snapshot.ts';
import type { DaemonConfig } from '../config.ts';
import type { ResolvedImage, SandboxLifecycle, SpecImageResolver } from '../sandboxes/lifecycle.ts';
import type { SandboxRecord } from '../state-store.ts';
import { requireUserLabels } from './labels.ts';
import type { SnapshotRecord, SnapshotSource, SnapshotStore } from './snapshot-store.ts';

export interface CreateSnapshotOptions {
  ttlSeconds?: number | undefined;
  labels?: Record<string, string> | undefined;
  /** Memory and processes too (the provider's `liveFork`); a native snapshot with a checkpoint. */
  live?: boolean | undefined;
}

export interface SnapshotServiceOptions {
  config: DaemonConfig;
  store: SnapshotStore;
  lifecycle: SandboxLifecycle;
  clock: Clock;
  logger: Logger;
  /** Renews a sandbox's lease on use (a snapshot of it is a use, as an exec is). */
  touch?: (record: SandboxRecord) => Promise<void>;
}

/** The provider-side name of a native snapshot: under Docker's default snapshot prefix, namespaced. */
function nativeImageName(namespace: string, id: string): string {
  return `gym-snapshot/${namespace}:${id}`;
}

function notFound(id: string): GymError {
  return new GymError(
    'SNAPSHOT_NOT_FOUND',
    `snapshot ${id} does not exist (removed, expired, or never made)`,
    {
      details: { snapshotId: id },
    },
  );
}

export class SnapshotService implements SpecImageResolver {
  readonly #config: DaemonConfig;
  readonly #store: SnapshotStore;
  readonly #lifecycle: SandboxLifecycle;
  readonly #clock: Clock;
  readonly #logger: Logger;
  readonly #touch: (record: SandboxRecord) => Promise<void>;
  /** Snapshots being made now: counted against `maxCount`, their archive files not orphans. */
  readonly #making = new Set<string>();
  /** Snapshots a create is starting from right now (how many): not reaped or removed under it. */
  readonly #inUse = new Map<string, number>();
  /** Being removed: no create starts from it any more. */
  readonly #removing = new Set<string>();
  /** The pools whose spec starts from a snapshot (set by the daemon once its pools exist). */
  #poolsUsing: (snapshotId: string) => string[] = () => [];
  #isReaping = false;

  constructor(options: SnapshotServiceOptions) {
    this.#config = options.config;
    this.#store = options.store;
    this.#lifecycle = options.lifecycle;
    this.#clock = options.clock;
    this.#logger = options.logger;
    this.#touch = options.touch ?? (async () => {});
  }

  /** Tells the service which pools start from a snapshot (they keep it past its TTL and from removal). */
  setPoolUsage(poolsUsing: (snapshotId: string) => string[]): void {
    this.#poolsUsing = poolsUsing;
  }

  list(): SnapshotInfo[] {
    return this.#store
      .all()
      .filter((record) => !this.#removing.has(record.info.id))
      .map((record) => record.info)
      .sort(
        (left, right) => left.createdAt.localeCompare(right.createdAt) || left.id.localeCompare(right.id),
      );
  }

  /** @throws GymError `SNAPSHOT_NOT_FOUND`. */
  get(id: string): SnapshotInfo {
    return this.#record(id).info;
  }

  #record(id: string): SnapshotRecord {
    const record = this.#store.get(id);
    if (record === undefined || this.#removing.has(id)) throw notFound(id);
    return record;
  }

  /**
   * Snapshots sandbox `sandboxId` now: `native` where its provider has the `snapshot` capability,
   * else `archive`.
   * @throws GymError `SANDBOX_NOT_FOUND`, `VALIDATION_FAILED` (a `gym.` label),
   *   `CAPACITY_EXCEEDED` (`snapshots.maxCount` kept already), `SNAPSHOT_TOO_LARGE`,
   *   `CAPABILITY_UNSUPPORTED` (an archive of a sandbox that itself started from an archive
   *   snapshot; `live` where the provider has no `liveFork`, or its backend refuses one now),
   *   `SANDBOX_NOT_READY` (`live`: the provider cannot stop the sandbox now), `PROVIDER_ERROR`.
   */
  async create(sandboxId: string, options: CreateSnapshotOptions = {}): Promise<SnapshotInfo> {
    const labels = options.labels ?? {};
    requireUserLabels(labels, 'snapshot labels');
    const sandbox = this.#lifecycle.record(sandboxId);
    const provider = this.#lifecycle.provider(sandbox.provider);
    const live = options.live === true;
    if (live) requireLiveFork(provider, sandbox.provider);
    await this.#touch(sandbox);
    const { maxCount, maxBytes } = this.#config.snapshots;
    if (this.#store.size + this.#making.size >= maxCount) {
      throw new GymError(
        'CAPACITY_EXCEEDED',
        `this daemon keeps ${maxCount} snapshots already (snapshots.maxCount); remove some (gym snapshot rm) or wait for their TTL`,
        { details: { limit: 'snapshots.maxCount', maxCount } },
      );
    }
    // The API's snapshot ids are `snp_` and 16 characters (core/schemas/snapshot.ts), not createId's `snp-`.
    const id = createId('snp').replace(/^snp-/, 'snp_');
    this.#making.add(id);
    try {
      const parentSnapshot = this.#parentSnapshot(sandbox);
      const method = provider.capabilities.snapshot && provider.snapshot !== undefined ? 'native' : 'archive';
      if (method === 'archive' && parentSnapshot?.source.kind === 'archive') {
        throw new GymError(
          'CAPABILITY_UNSUPPORTED',
          `sandbox ${sandboxId} started from archive snapshot ${parentSnapshot.info.id}; provider ${sandbox.provider} has no native snapshot, and an archive holds only what changed since the sandbox was created, so it cannot be snapshotted again`,
          { details: { capability: 'snapshot', provider: sandbox.provider } },
        );
      }
      const now = this.#clock.now();
      const ttlSeconds = options.ttlSeconds ?? this.#config.snapshots.ttlSeconds;
      const { source, sizeBytes } =
        method === 'native'
          ? await this.#native(provider, sandbox, id, now + ttlSeconds * 1000, maxBytes, live)
          : await this.#archive(provider, sandbox, id, maxBytes);
      const info: SnapshotInfo = {
        id,
        image: snapshotRef(id),
        provider: sandbox.provider,
        sandboxId,
        baseImage: parentSnapshot?.info.baseImage ?? sandbox.spec.image,
        method,
        live,
        createdAt: new Date(now).toISOString(),
        expiresAt: new Date(now + ttlSeconds * 1000).toISOString(),
        sizeBytes: sizeBytes ?? null,
        labels,
      };
      try {
        await this.#store.put({ info, source });
      } catch (error) {
        await this.#removeContent(source, sandbox.provider).catch(() => {});
        throw new GymError('INTERNAL', `could not record snapshot ${id}; it was removed: ${String(error)}`, {
          cause: error,
        });
      }
      this.#logger.info(
        { snapshotId: id, sandboxId, provider: sandbox.provider, method, live, sizeBytes },
        'snapshot made',
      );
      return info;
    } finally {
      this.#making.delete(id);
    }
  }

  /** The snapshot a sandbox was created from, while it is still kept. */
  #parentSnapshot(sandbox: SandboxRecord): SnapshotRecord | undefined {
    const parentId = parseSnapshotRef(sandbox.spec.image);
    return parentId === null ? undefined : this.#store.get(parentId);
  }

  async #native(
    provider: SandboxProvider,
    sandbox: SandboxRecord,
    id: string,
    expiresAtMs: number,
    maxBytes: number,
    live: boolean,
  ): Promise<{ source: SnapshotSource; sizeBytes: number | undefined }> {
    // `managedId` and `maxBytes` (the provider contract's managed snapshot): the provider names the
    // image itself, never over one that is not a snapshot, and bounds it; a provider that knows
    // neither takes `image` as the name.
    const options: SnapshotOptions & { managedId?: string; maxBytes?: number } = {
      image: nativeImageName(this.#config.namespace, id),
      labels: {
        snapshot: id,
        namespace: this.#config.namespace,
        'snapshot-expires-at': String(Math.ceil(expiresAtMs / 1000)),
      },
      managedId: id,
      maxBytes,
      ...(live ? { live: true } : {}),
    };
    const made = await provider.snapshot!(sandbox.id, options);
    const source: SnapshotSource = {
      kind: 'native',
      image: made.image,
      ...(made.checkpoint === undefined ? {} : { checkpoint: made.checkpoint }),
    };
    if (live && made.checkpoint === undefined) {
      await this.#removeContent(source, sandbox.provider).catch(() => {});
      throw new GymError(
        'PROVIDER_ERROR',
        `provider ${sandbox.provider} declares liveFork but its snapshot of ${sandbox.id} holds no checkpoint; it was removed`,
        { details: { provider: sandbox.provider, capability: 'liveFork' } },
      );
    }
    if (made.sizeBytes !== undefined && made.sizeBytes > maxBytes) {
      await this.#removeContent(source, sandbox.provider).catch(() => {});
      throw tooLarge(made.sizeBytes, maxBytes);
    }
    return { source, sizeBytes: made.sizeBytes };
  }

  async #archive(
    provider: SandboxProvider,
    sandbox: SandboxRecord,
    id: string,
    maxBytes: number,
  ): Promise<{ source: SnapshotSource; sizeBytes: number }> {
    const file = join(this.#store.archiveDirectory, `${id}.tar`);
    try {
      const manifest = await captureArchiveSnapshot(provider, sandbox.id, {
        file,
        maxBytes,
        createdAtMs: Date.parse(sandbox.createdAt),
      });
      return { source: { kind: 'archive', manifest }, sizeBytes: manifest.sizeBytes };
    } catch (error) {
      await rm(file, { force: true }).catch(() => {});
      // The toolkit names the limit its own way (its signature says RESOURCE_EXHAUSTED); the API says SNAPSHOT_TOO_LARGE.
      const code = error instanceof GymError ? (error.code as string) : '';
      if (code === 'SNAPSHOT_TOO_LARGE') throw error;
      if (code === 'RESOURCE_EXHAUSTED') throw tooLarge(undefined, maxBytes);
      throw error;
    }
  }

  async #removeContent(source: SnapshotSource, providerName: string): Promise<void> {
    if (source.kind === 'archive') {
      await removeArchiveSnapshot(source.manifest);
      await rm(source.manifest.file, { force: true });
      return;
    }
    const provider = this.#lifecycle.providers.get(providerName);
    if (provider === undefined) {
      // Its provider is no longer configured: nothing here can remove the image, and nothing can start from it.
      this.#logger.warn(
        { image: source.image, provider: providerName },
        'forgot a snapshot of a provider no longer configured',
      );
      return;
    }
    await provider.deleteSnapshot?.(source.image);
  }

  /**
   * Removes a snapshot and its content. Idempotent: an unknown id is success.
   * @throws GymError `VALIDATION_FAILED` while a pool's spec starts from it (naming the pools),
   *   `PROVIDER_ERROR` (the content could not be removed; the snapshot is kept).
   */
  async delete(id: string): Promise<void> {
    const record = this.#store.get(id);
    if (record === undefined || this.#removing.has(id)) return;
    if (this.#inUse.has(id)) {
      throw new GymError(
        'VALIDATION_FAILED',
        `snapshot ${id} is being replayed into a new sandbox right now; remove it once that create is done`,
        { details: { snapshotId: id, retryable: true } },
      );
    }
    const pools = this.#poolsUsing(id);
    if (pools.length > 0) {
      throw new GymError(
        'VALIDATION_FAILED',
        `snapshot ${id} is the image of pool ${pools.join(', ')}; remove or redefine the pool first`,
        { details: { snapshotId: id, pools } },
      );
    }
    await this.#remove(record, 'request');
  }

  async #remove(record: SnapshotRecord, reason: string): Promise<void> {
    const { id } = record.info;
    this.#removing.add(id);
    try {
      await this.#removeContent(record.source, record.info.provider);
      await this.#store.delete(id);
      this.#logger.info({ snapshotId: id, provider: record.info.provider, reason }, 'snapshot removed');
    } finally {
      this.#removing.delete(id);
    }
  }

  /** One pass of the reaper: snapshots past their TTL that no pool and no create in flight uses. */
  async reap(): Promise<void> {
    if (this.#isReaping) return;
    this.#isReaping = true;
    try {
      const now = this.#clock.now();
      for (const record of this.#store.all()) {
        const { id } = record.info;
        if (Date.parse(record.info.expiresAt) > now || this.#inUse.has(id) || this.#removing.has(id))
          continue;
        if (this.#poolsUsing(id).length > 0) continue;
        await this.#remove(record, 'expired').catch((error: unknown) =>
          this.#logger.warn(
            { snapshotId: id, error: String(error) },
            'could not reap a snapshot; will retry',
          ),
        );
      }
    } finally {
      this.#isReaping = false;
    }
  }

  /**
   * Drops records whose content is gone (an archive file removed, a native image the provider no
   * longer has) and removes archive files no record names (left by a crash mid-capture).
   */
  async reconcile(): Promise<{ dropped: number; strayFiles: number }> {
    let dropped = 0;
    for (const record of this.#store.all()) {
      const { id } = record.info;
      if (this.#inUse.has(id) || this.#removing.has(id)) continue;
      let isGone = false;
      if (record.source.kind === 'archive') {
        isGone = await stat(record.source.manifest.file).then(
          () => false,
          (error: NodeJS.ErrnoException) => error.code === 'ENOENT',
        );
      } else {
        const provider = this.#lifecycle.providers.get(record.info.provider);
        if (provider?.inspectImage !== undefined) {
          isGone = (await provider.inspectImage(record.source.image).catch(() => undefined)) === null;
        }
      }
      if (!isGone) continue;
      dropped += 1;
      this.#logger.warn(
        { snapshotId: id, provider: record.info.provider, method: record.info.method },
        'dropped a snapshot whose content is gone',
      );
      await this.#store.delete(id);
    }
    const named = new Set(
      this.#store
        .all()
        .flatMap((record) =>
          record.source.kind === 'archive' ? [basename(record.source.manifest.file)] : [],
        ),
    );
    let strayFiles = 0;
    for (const name of await readdir(this.#store.archiveDirectory).catch(() => [] as string[])) {
      const id = name.replace(/\..*$/, '');
      if (named.has(name) || this.#making.has(id) || this.#store.get(id) !== undefined) continue;
      strayFiles += 1;
      await rm(join(this.#store.archiveDirectory, name), { force: true, recursive: true }).catch(() => {});
    }
    return { dropped, strayFiles };
  }

  /** The snapshot a spec names and the provider it must be made on (its own when the spec names none). */
  providerFor(spec: SandboxSpec): string | undefined {
    const id = parseSnapshotRef(spec.image);
    if (id === null) return spec.provider;
    return spec.provider ?? this.#store.get(id)?.info.provider;
  }

  /**
   * @throws GymError `SNAPSHOT_NOT_FOUND` (an unknown id), `VALIDATION_FAILED` (a snapshot of
   *   another provider, or an image that looks like a reference but is not one).
   */
  check(spec: SandboxSpec, providerName: string): void {
    this.#named(spec, providerName);
  }

  #named(spec: SandboxSpec, providerName: string): SnapshotRecord | null {
    if (!spec.image.startsWith('snapshot:')) return null;
    const id = parseSnapshotRef(spec.image);
    if (id === null) {
      throw new GymError(
        'VALIDATION_FAILED',
        `invalid sandbox spec: image: ${spec.image} is no snapshot reference (snapshot:snp_...)`,
        {
          details: { issues: [{ path: 'image', message: 'not a snapshot reference' }] },
        },
      );
    }
    const record = this.#record(id);
    if (record.info.provider !== providerName) {
      throw new GymError(
        'VALIDATION_FAILED',
        `invalid sandbox spec: image: snapshot ${id} was made on provider ${record.info.provider} and cannot start a sandbox on ${providerName}`,
        {
          details: {
            issues: [{ path: 'image', message: `a snapshot of provider ${record.info.provider}` }],
            snapshotId: id,
          },
        },
      );
    }
    return record;
  }

  /** What the provider creates for a spec naming a snapshot, and what makes the new sandbox hold its files. */
  resolve(spec: SandboxSpec, providerName: string): ResolvedImage | null {
    const record = this.#named(spec, providerName);
    if (record === null) return null;
    const { id } = record.info;
    this.#inUse.set(id, (this.#inUse.get(id) ?? 0) + 1);
    let isReleased = false;
    const release = () => {
      if (isReleased) return;
      isReleased = true;
      const left = (this.#inUse.get(id) ?? 1) - 1;
      if (left <= 0) this.#inUse.delete(id);
      else this.#inUse.set(id, left);
    };
    if (record.source.kind === 'native')
      return {
        image: record.source.image,
        ...(record.source.checkpoint === undefined ? {} : { restore: record.source.checkpoint }),
        release,
      };
    const { manifest } = record.source;
    return {
      image: record.info.baseImage,
      prepare: (provider, sandboxId) => replayArchiveSnapshot(provider, sandboxId, manifest),
      release,
    };
  }
}

/** @throws GymError `CAPABILITY_UNSUPPORTED` where `provider` carries no memory and processes over. */
export function requireLiveFork(provider: SandboxProvider, providerName: string): void {
  if (provider.capabilities.liveFork === true && provider.snapshot !== undefined) return;
  throw new GymError(
    'CAPABILITY_UNSUPPORTED',
    `provider ${providerName} cannot carry memory and processes over (no liveFork capability); leave live out for the files alone`,
    { details: { capability: 'liveFork', provider: providerName } },
  );
}

function tooLarge(sizeBytes: number | undefined, maxBytes: number): GymError {
  return new GymError(
    'SNAPSHOT_TOO_LARGE',
    `the snapshot ${sizeBytes === undefined ? 'would be' : `is ${sizeBytes} bytes,`} larger than snapshots.maxBytes (${maxBytes}); nothing of it is kept`,
    { details: { maxBytes, ...(sizeBytes === undefined ? {} : { sizeBytes }) } },
  );
}
