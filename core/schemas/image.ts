/**
 * Request and response bodies of the image routes (`GET` / `POST /v1/images`): the images the
 * project builds itself, prepared by the provider that will run them.
 */
import { z } from 'zod';
import { ErrorBodySchema } from './api.ts';
import { AbsolutePathSchema, EnvSchema, ExecArgumentSchema } from './common.ts';

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

/** At most this many steps in a build plan (a Dockerfile's RUN, COPY and WORKDIR). */
export const MAX_PLAN_STEPS = 256;

/**
 * The most a build plan's upload (`POST /v1/images` as `application/x-tar`: the plan, then one
 * tar per `files` step) may carry; it is spooled to disk as it arrives, never held in memory.
 */
export const MAX_PLAN_UPLOAD_BYTES = 1024 * 1024 * 1024;

/** The plan itself, the first entry of the upload. */
export const MAX_PLAN_JSON_BYTES = 4 * 1024 * 1024;

/** `user`, `uid`, `user:group` or `uid:gid`, nothing a shell or a flag could make more of. */
const OwnerSchema = z
  .string()
  .regex(/^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,63})?$/, {
    message: 'must be user[:group] (names or numeric ids)',
  });

const ArgvSchema = z.array(ExecArgumentSchema).min(1).max(4096);

/** One step of a build plan; a `files` step's tar is the upload's entry `step-<index>.tar`. */
export const ImagePlanStepSchema = z.discriminatedUnion('kind', [
  z
    .object({
      kind: z.literal('run'),
      argv: ArgvSchema,
      /** Default: the base image's working directory. */
      workdir: AbsolutePathSchema.optional(),
      env: EnvSchema.default({}),
      /** Default: the base image's user. */
      user: OwnerSchema.optional(),
    })
    .strict(),
  z
    .object({
      kind: z.literal('files'),
      /** Where the tar is unpacked; nothing in it may climb out of here. */
      path: AbsolutePathSchema,
      chown: OwnerSchema.optional(),
      chmod: z
        .string()
        .regex(/^[0-7]{3,4}$/, { message: 'must be an octal mode' })
        .optional(),
    })
    .strict(),
]);

/** What the image ends with; an absent setting is the base image's. */
export const ImagePlanSettingsSchema = z
  .object({
    env: EnvSchema.default({}),
    workdir: AbsolutePathSchema.optional(),
    user: OwnerSchema.optional(),
    cmd: z.array(ExecArgumentSchema).max(4096).optional(),
    entrypoint: z.array(ExecArgumentSchema).max(4096).optional(),
    labels: z.record(z.string().min(1).max(256), z.string().max(4096)).default({}),
  })
  .strict();

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
  z
    .object({
      /**
       * A build plan (a Harbor task's Dockerfile): sent only as the first entry (`plan.json`) of
       * an `application/x-tar` upload whose further entries are the `files` steps' tars.
       */
      kind: z.literal('plan'),
      reference: DerivedImageReferenceSchema,
      /** A built-in definition's name (built first when missing) or a reference the provider has. */
      base: z.string().min(1).max(512),
      steps: z.array(ImagePlanStepSchema).max(MAX_PLAN_STEPS),
      settings: ImagePlanSettingsSchema.default({ env: {}, labels: {} }),
      /** The whole build (Harbor's build_timeout_sec); default: the provider's. */
      timeoutSeconds: z
        .number()
        .int()
        .min(1)
        .max(24 * 3600)
        .optional(),
      provider: z.string().optional(),
    })
    .strict(),
]);
export type PrepareImageRequest = z.input<typeof PrepareImageRequestSchema>;
/** A build plan as a client writes it. */
export type ImagePlanRequest = Extract<PrepareImageRequest, { kind: 'plan' }>;
/** A build plan as the daemon has it, checked and with defaults. */
export type CheckedImagePlan = Extract<z.infer<typeof PrepareImageRequestSchema>, { kind: 'plan' }>;

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

export const InspectImageQuerySchema = z
  .object({ reference: z.string().min(1).max(512), provider: z.string().optional() })
  .strict();

/** `GET /v1/images/inspect`: an image the provider has (404 `IMAGE_NOT_FOUND` otherwise). */
export const ImageInfoSchema = z.object({
  provider: z.string(),
  reference: z.string(),
  labels: z.record(z.string(), z.string()),
  sizeBytes: z.number().optional(),
  createdAt: z.string().optional(),
  /** The working directory a sandbox of it starts in, when the image sets one. */
  workdir: z.string().optional(),
  /** The image's ENTRYPOINT, when it sets one and the provider can tell. */
  entrypoint: z.array(z.string()).optional(),
});
export type ImageInfoResponse = z.infer<typeof ImageInfoSchema>;

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
