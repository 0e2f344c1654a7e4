/**
 * What a provider is handed to make an image, and what it shows of the images it has: the
 * contract between the registry-free builder (`images/build.ts`), the daemon's image service and
 * each provider's `prepareImage` / `inspectImage` / `listImages` (`providers/sandbox-provider.ts`).
 */
import type { Readable } from 'node:stream';

/**
 * The kinds of image source a provider can turn into what it runs:
 * - `rootfs`: a root filesystem as a tar stream plus its config, what the registry-free builder
 *   (`images/build.ts`) produces. Docker imports it (`docker import`); Enroot would make a
 *   squashfs of it, Apptainer a SIF, Kubernetes an image pushed to (or preloaded on) its nodes.
 * - `derived`: an image the provider already has, with files written into a directory and one
 *   command run there (a repository at its base commit: the swe-mini task images). Docker runs a
 *   container of the base and commits it; a provider with `snapshot` can do the same with its own
 *   sandbox operations (create from the base, `writeArchive`, `exec`, `snapshot`). It is an image
 *   operation rather than something the daemon composes from sandboxes because what it yields is
 *   the backend's own artifact, stored under the content-addressed reference it is given, which a
 *   snapshot (whose reference is opaque) does not promise.
 * - `plan`: a build plan (what a Dockerfile's subset becomes, environments/kinds/harbor/dockerfile.ts):
 *   a base image, ordered steps (`run` a command as a user in a directory with an environment;
 *   `files`: a checked tar unpacked at a path) and the settings the image ends with (env,
 *   workdir, user, cmd, entrypoint, labels). Docker runs the steps in a container of the base
 *   with no network and commits it with the settings.
 */
export type ImageFormat = 'rootfs' | 'derived' | 'plan';

/** How a sandbox of the image starts, whatever the backend's image format. */
export interface ImageConfig {
  /** Environment every process of the sandbox gets (a spec's `env` is added on top). */
  env: Record<string, string>;
  /** The working directory of commands; default `/`. */
  workdir?: string;
  /** The image's default command (providers that run their own keeper ignore it). */
  cmd?: string[];
  /** Facts about the image (`gym.image-definition`), shown by `listImages` and filtered on there. */
  labels: Record<string, string>;
}

interface ImageSourceBase {
  /**
   * The reference specs will name, content-addressed: `gym/<name>:<hash of everything that
   * shapes the image>`. The same reference always means the same image, so a caller that finds
   * it with `inspectImage` skips the work (the daemon does; a provider need not check again).
   */
  reference: string;
}

/** A root filesystem (see `ImageFormat`). */
export interface RootfsImageSource extends ImageSourceBase {
  format: 'rootfs';
  /** The filesystem as a tar stream with numeric owners; read once, to its end. */
  rootfs: Readable;
  config: ImageConfig;
  /** Further references made to point at the same image (`gym/busybox:latest`). */
  aliases?: string[];
}

/** A base image plus files and a command (see `ImageFormat`). */
export interface DerivedImageSource extends ImageSourceBase {
  format: 'derived';
  /** An image the provider has; `IMAGE_NOT_FOUND` otherwise. */
  base: string;
  /** Absolute; created if missing, and the new image's working directory. */
  workdir: string;
  /** Files to write, by path relative to `workdir` (mode 0644). */
  files: Record<string, string>;
  /** Run with `sh -c` in `workdir` after the files are written; no network. */
  command: string;
  /** Environment of `command` only (not kept in the image). */
  env: Record<string, string>;
  /** Added to the base image's labels. */
  labels: Record<string, string>;
}

/** One step of a `plan` source, carried out in order. */
export type ImageBuildStep =
  | {
      kind: 'run';
      /** The program and its arguments (no shell unless argv names one). */
      argv: string[];
      /** Default: the base image's working directory. */
      workdir?: string;
      env: Record<string, string>;
      /** Default: the base image's user. */
      user?: string;
    }
  | {
      kind: 'files';
      /** Absolute; created (as root) when missing. */
      path: string;
      /**
       * A tar whose entry names are relative to `path`, already checked by the daemon (no entry
       * or link climbs out of `path`; see providers/shared/archive.ts). Opened once.
       */
      archive: () => Readable;
      /** The top-level entries of the tar (what `chown` and `chmod` apply to, recursively). */
      entries: string[];
      /** `user[:group]` to own what the tar put there (root otherwise). */
      chown?: string;
      /** Octal mode for what the tar put there (its own modes otherwise). */
      chmod?: string;
    };

/** The settings a `plan` image ends with; an absent one is the base image's. */
export interface ImagePlanSettings {
  /** Added to the base image's environment. */
  env: Record<string, string>;
  workdir?: string;
  user?: string;
  cmd?: string[];
  entrypoint?: string[];
  /** Added to the base image's labels. */
  labels: Record<string, string>;
}

/** A base image, steps, and final settings (see `ImageFormat`). */
export interface PlanImageSource extends ImageSourceBase {
  format: 'plan';
  /** An image the provider has; `IMAGE_NOT_FOUND` otherwise. */
  base: string;
  steps: ImageBuildStep[];
  settings: ImagePlanSettings;
  /** The whole build, after which it fails (`VALIDATION_FAILED`) and leaves nothing; default the provider's. */
  timeoutSeconds?: number;
}

export type ImageSource = RootfsImageSource | DerivedImageSource | PlanImageSource;

/** An image as `inspectImage` and `listImages` show it. */
export interface ImageInfo {
  reference: string;
  labels: Record<string, string>;
  /** What the image takes in the backend's store, when it can tell. */
  sizeBytes?: number;
  /** ISO 8601, when the backend can tell. */
  createdAt?: string;
  /** The working directory a sandbox of the image starts in, when the image sets one. */
  workdir?: string;
  /** The image's ENTRYPOINT, when it sets one and the backend can tell (Harbor tasks run it). */
  entrypoint?: string[];
  /** The image's CMD, when it sets one and the backend can tell (`entrypoint: "image"` runs both). */
  command?: string[];
}

export interface ImageFilter {
  /** Only images carrying every one of these label keys (any value). */
  labelKeys?: string[];
}
