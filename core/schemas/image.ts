/**
 * Request and response bodies of the image routes (`GET` / `POST /v1/images`): the images the
 * project builds itself, prepared by the provider that will run them.
 */
import { z } from 'zod';
import { ErrorBodySchema } from './api.ts';
import { AbsolutePathSchema, EnvSchema } from './common.ts';

/** A built-in image definition's name (`busybox`, `debian-base`; see images/definitions.ts). */
const DefinitionNameSchema = z.string().regex(/^[a-z0-9][a-z0-9-]{0,62}$/);

/**
 * The reference of a derived image: `gym/<name>:<tag>`, content-addressed by the caller (the same
 * reference always means the same base, files and command, so one that exists is never made
 * again, and nothing existing is replaced through the API).
 */
export const DerivedImageReferenceSchema = z
  .string()
  .regex(/^gym\/[a-z0-9][a-z0-9._-]{0,127}:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$/, {
    message: 'must be gym/<name>:<tag> (lower-case name; the tag a content hash)',
  });

/** A path under the image's workdir: relative, no `..`, no NUL. */
const RelativeFilePathSchema = z
  .string()
  .min(1)
  .max(4096)
  .refine(
    (path) =>
      !path.startsWith('/') &&
      !path.includes('\0') &&
      path.split('/').every((part) => part !== '..' && part !== '' && part !== '.'),
    { message: 'must be a relative path without "..", "." or empty parts' },
  );

export const PrepareImageRequestSchema = z.discriminatedUnion('kind', [
  z
    .object({
      /** Build a built-in definition from its root filesystem. */
      kind: z.literal('definition'),
      name: DefinitionNameSchema,
      /** Build again even when the provider has the image. */
      force: z.boolean().default(false),
      /** Default: the daemon's default provider. */
      provider: z.string().optional(),
    })
    .strict(),
  z
    .object({
      /** A base image with files written into `workdir` and a command run there (a task image). */
      kind: z.literal('derived'),
      reference: DerivedImageReferenceSchema,
      /** A built-in definition's name (built first when missing) or a reference the provider has. */
      base: z.string().min(1).max(512),
      workdir: AbsolutePathSchema,
      files: z.record(RelativeFilePathSchema, z.string()),
      command: z
        .string()
        .min(1)
        .max(64 * 1024),
      env: EnvSchema.default({}),
      provider: z.string().optional(),
    })
    .strict(),
]);
export type PrepareImageRequest = z.input<typeof PrepareImageRequestSchema>;

/** One image a request made or found. */
export const PreparedImageSchema = z.object({
  /** The definition's name, or the derived image's reference. */
  name: z.string(),
  reference: z.string(),
  /** False when the provider already had it (its reference is content-addressed). */
  built: z.boolean(),
  durationMs: z.number().int().nonnegative(),
});
export type PreparedImage = z.infer<typeof PreparedImageSchema>;

export const PrepareImageResponseSchema = z.object({
  provider: z.string(),
  /** A derived image's base first when it had to be built, then the image asked for. */
  images: z.array(PreparedImageSchema),
});
export type PrepareImageResponse = z.infer<typeof PrepareImageResponseSchema>;

export const PrepareImageQuerySchema = z
  .object({
    /** `ndjson`: progress events as the build goes, then one result (or error) event. */
    stream: z.enum(['ndjson']).optional(),
  })
  .strict();

/** A step of a build: the root filesystem made, handed to the provider, or an image derived. */
export const ImageProgressSchema = z.object({
  /** The definition's name or the derived image's reference. */
  image: z.string(),
  stage: z.enum(['rootfs', 'prepare', 'derive']),
  message: z.string(),
});
export type ImageProgress = z.infer<typeof ImageProgressSchema>;

/** One line of `POST /v1/images?stream=ndjson`: progress, then exactly one result or error. */
export const ImageStreamEventSchema = z.discriminatedUnion('type', [
  ImageProgressSchema.extend({ type: z.literal('progress') }),
  z.object({ type: z.literal('result'), result: PrepareImageResponseSchema }),
  z.object({ type: z.literal('error'), error: ErrorBodySchema.shape.error }),
]);
export type ImageStreamEvent = z.infer<typeof ImageStreamEventSchema>;

export const ListImagesQuerySchema = z.object({ provider: z.string().optional() }).strict();

export const ImageListSchema = z.object({
  provider: z.string(),
  /** Images the project built on this provider, newest first. */
  images: z.array(
    z.object({
      reference: z.string(),
      /** The definition it was built from (a task image carries its base's). */
      definition: z.string(),
      sizeBytes: z.number().optional(),
      createdAt: z.string().optional(),
    }),
  ),
  /** Each built-in definition, its current reference, and whether the provider has it. */
  definitions: z.array(
    z.object({
      name: z.string(),
      description: z.string(),
      reference: z.string(),
      present: z.boolean(),
    }),
  ),
});
export type ImageList = z.infer<typeof ImageListSchema>;
