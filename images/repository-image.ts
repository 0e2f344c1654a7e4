/**
 * Bakes a repository into an image: a base image, the files written into a directory, a command
 * run there (the base commit). Used for task images (one per swe-mini task). The provider makes
 * it (a `derived` image source, see `core/image-source.ts`); an image that already
 * exists under its content-hash reference is not made again.
 */
import { GymError } from '../core/errors.ts';
import type { ImageStore } from './build.ts';

export interface RepositoryImageSpec {
  baseImage: string;
  /** Content-addressed: the same reference always means the same files and command. */
  reference: string;
  workdir: string;
  files: Record<string, string>;
  /** Run in `workdir` after the files are written (e.g. `git init && git commit`). */
  command: string;
  env: Record<string, string>;
  labels?: Record<string, string>;
}

export async function buildRepositoryImage(
  store: ImageStore,
  spec: RepositoryImageSpec,
): Promise<{ reference: string; built: boolean; durationMs: number }> {
  const started = performance.now();
  if ((await store.inspectImage(spec.reference)) !== null)
    return { reference: spec.reference, built: false, durationMs: 0 };
  if (!store.formats.includes('derived')) {
    throw new GymError(
      'CAPABILITY_UNSUPPORTED',
      `the provider cannot derive an image from a base (it takes: ${store.formats.join(', ') || 'none'})`,
      { details: { capability: 'imageFormats', format: 'derived' } },
    );
  }
  await store.prepareImage({
    format: 'derived',
    reference: spec.reference,
    base: spec.baseImage,
    workdir: spec.workdir,
    files: spec.files,
    command: spec.command,
    env: spec.env,
    labels: spec.labels ?? {},
  });
  return { reference: spec.reference, built: true, durationMs: Math.round(performance.now() - started) };
}
