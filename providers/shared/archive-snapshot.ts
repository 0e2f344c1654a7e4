/**
 * The provider-neutral snapshot (the `archive` method of `core/schemas/snapshot.ts`), for any
 * provider, built only on the contract's exec and archive operations: the paths of a sandbox
 * that changed since it was created, as a tar file the daemon keeps, plus the list of the base
 * image's paths it removed; replayed onto a fresh sandbox of the base image, it gives that
 * sandbox the parent's files.
 *
 * INTERFACE ONLY in this commit: the bodies come with the archive-snapshot work (branch
 * h23-archive). The daemon's fork code builds against these signatures.
 */
import { GymError } from '../../core/errors.ts';
import type { SandboxProvider } from '../sandbox-provider.ts';

export interface ArchiveCaptureOptions {
  /** The file to write the archive to (the daemon's, mode 0600); removed again if the capture fails. */
  file: string;
  /** The most bytes the archive may hold; past it the capture fails and leaves no file. */
  maxBytes: number;
  /** When the sandbox was created (epoch ms): what changed after it is captured. */
  createdAtMs: number;
  signal?: AbortSignal;
}

/** What replay needs, JSON-serialisable (the daemon stores it in its snapshot record). */
export interface ArchiveSnapshotManifest {
  /** The tar file of changed paths. */
  file: string;
  sizeBytes: number;
  /** The method's own facts (what was removed, what was left out and why), opaque to the daemon. */
  details: Record<string, unknown>;
}

/**
 * Captures sandbox `id`'s changes since creation into `options.file`.
 * @throws GymError `SANDBOX_NOT_FOUND`, `RESOURCE_EXHAUSTED` (over `maxBytes`), `PROVIDER_ERROR`.
 */
export async function captureArchiveSnapshot(
  _provider: SandboxProvider,
  _id: string,
  _options: ArchiveCaptureOptions,
): Promise<ArchiveSnapshotManifest> {
  throw new GymError('CAPABILITY_UNSUPPORTED', 'archive snapshots are not built yet');
}

/**
 * Makes sandbox `id` (fresh, of the snapshot's base image, nothing run in it yet) hold the
 * snapshot's files: the archive written over its root, the removed paths removed.
 * @throws GymError `SANDBOX_NOT_FOUND`, `PROVIDER_ERROR`.
 */
export async function replayArchiveSnapshot(
  _provider: SandboxProvider,
  _id: string,
  _manifest: ArchiveSnapshotManifest,
  _signal?: AbortSignal,
): Promise<void> {
  throw new GymError('CAPABILITY_UNSUPPORTED', 'archive snapshots are not built yet');
}

/** Removes the snapshot's files. Idempotent. */
export async function removeArchiveSnapshot(_manifest: ArchiveSnapshotManifest): Promise<void> {}
