/**
 * The daemon's images: built-in definitions and derived images (task images) prepared by the
 * provider that will run them, whatever its backend (`prepareImage` and its kin). The CLI asks
 * here (`gym image build|ls`, `gym doctor`, `gym eval run`), never an engine.
 */
import { GymError } from '../core/errors.ts';
import type { Logger } from '../core/logger.ts';
import {
  type ImageInfoResponse,
  type ImageList,
  type ImageProgress,
  type PreparedImage,
  type PrepareImageRequest,
  PrepareImageRequestSchema,
  type PrepareImageResponse,
} from '../core/schemas/image.ts';
import { parseOrThrow } from '../core/validate.ts';
import { IMAGE_DEFINITION_LABEL, ImageBuilder, imageReference } from '../images/build.ts';
import { findImageDefinition, IMAGE_DEFINITIONS, IMAGE_REPOSITORY_PREFIX } from '../images/definitions.ts';
import { buildRepositoryImage } from '../images/repository-image.ts';
import type { ImageBuildStep, SandboxProvider } from '../providers/sandbox-provider.ts';
import { requireImageFormat, requireImages } from './capabilities.ts';
import type { PlanUpload } from './image-upload.ts';

export interface ImageServiceOptions {
  providers: ReadonlyMap<string, SandboxProvider>;
  /** The provider a request that names none goes to. */
  defaultProvider: () => string;
  logger: Logger;
}

function unknownDefinition(name: string): GymError {
  return new GymError(
    'VALIDATION_FAILED',
    `no image definition named "${name}"; available: ${IMAGE_DEFINITIONS.map((item) => item.name).join(', ')}`,
    { details: { definition: name } },
  );
}

export class ImageService {
  readonly #options: ImageServiceOptions;
  /** One builder per provider, so concurrent requests for one image share its build. */
  readonly #builders = new Map<string, ImageBuilder>();
  /** Derived images being made, by provider and reference. */
  readonly #deriving = new Map<string, Promise<PreparedImage>>();

  constructor(options: ImageServiceOptions) {
    this.#options = options;
  }

  #provider(name: string | undefined): { name: string; provider: SandboxProvider } {
    const providerName = name ?? this.#options.defaultProvider();
    const provider = this.#options.providers.get(providerName);
    if (provider === undefined) {
      throw new GymError(
        'PROVIDER_NOT_FOUND',
        `no provider named "${providerName}" is configured; configured: ${[...this.#options.providers.keys()].join(', ')}`,
        { details: { provider: providerName, available: [...this.#options.providers.keys()] } },
      );
    }
    return { name: providerName, provider };
  }

  #builder(providerName: string, provider: SandboxProvider): ImageBuilder {
    let builder = this.#builders.get(providerName);
    if (builder === undefined) {
      builder = new ImageBuilder(
        requireImages(providerName, provider),
        this.#options.logger.child({ provider: providerName }),
      );
      this.#builders.set(providerName, builder);
    }
    return builder;
  }

  /**
   * Refuses now what `prepare` would refuse first (an unknown provider, one without the image
   * part), so a streamed build answers those as ordinary errors.
   */
  check(providerName?: string): void {
    const { name, provider } = this.#provider(providerName);
    this.#builder(name, provider);
  }

  /** The images we built on a provider, and whether it has each built-in definition's current image. */
  async list(providerName?: string): Promise<ImageList> {
    const { name, provider } = this.#provider(providerName);
    const builder = this.#builder(name, provider);
    const definitions = await Promise.all(
      IMAGE_DEFINITIONS.map(async (definition) => {
        const reference = await imageReference(definition).catch(
          (error: unknown) => `${definition.name} (cannot hash its recipe: ${(error as Error).message})`,
        );
        const present = reference.startsWith(IMAGE_REPOSITORY_PREFIX) && (await builder.exists(reference));
        return { name: definition.name, description: definition.description, reference, present };
      }),
    );
    return { provider: name, images: await builder.list(), definitions };
  }

  /** An image the provider has, with the directory its sandboxes start in. */
  async inspect(reference: string, providerName?: string): Promise<ImageInfoResponse> {
    const { name, provider } = this.#provider(providerName);
    const info = await requireImages(name, provider).inspectImage(reference);
    if (info === null)
      throw new GymError('IMAGE_NOT_FOUND', `provider ${name} has no image "${reference}"`, {
        details: { image: reference, provider: name },
      });
    return { provider: name, ...info };
  }

  /**
   * Builds a definition (unless the provider has its current image, or `force`), or derives an
   * image from a base (whose definition is built first when it names one that is missing).
   */
  async prepare(
    input: PrepareImageRequest | unknown,
    options: { onProgress?: (progress: ImageProgress) => void } = {},
  ): Promise<PrepareImageResponse> {
    const request = parseOrThrow(PrepareImageRequestSchema, input, 'image request');
    const progressOf =
      (image: string) =>
      (stage: ImageProgress['stage'], message: string): void =>
        options.onProgress?.({ image, stage, message });
    const { name: providerName, provider } = this.#provider(request.provider);
    const builder = this.#builder(providerName, provider);
    if (request.kind === 'definition') {
      const definition = findImageDefinition(request.name);
      if (definition === undefined) throw unknownDefinition(request.name);
      return {
        provider: providerName,
        images: [
          await builder.build(definition, { force: request.force, onProgress: progressOf(definition.name) }),
        ],
      };
    }
    if (request.kind === 'plan')
      throw new GymError(
        'VALIDATION_FAILED',
        'a build plan is sent as an application/x-tar upload: plan.json, then one tar per files step',
      );
    const images: PreparedImage[] = [];
    let base = request.base;
    const baseDefinition = findImageDefinition(request.base);
    if (baseDefinition !== undefined) {
      const built = await builder.build(baseDefinition, { onProgress: progressOf(baseDefinition.name) });
      if (built.built) images.push(built);
      base = built.reference;
    }
    const repository = request.reference.slice(0, request.reference.lastIndexOf(':'));
    if (
      IMAGE_DEFINITIONS.some((definition) => `${IMAGE_REPOSITORY_PREFIX}${definition.name}` === repository)
    ) {
      throw new GymError(
        'FORBIDDEN_BY_CONFIG',
        `${request.reference} is a built-in definition's name; a derived image needs a name of its own`,
        { details: { reference: request.reference } },
      );
    }
    const key = `${providerName}\0${request.reference}`;
    let derived = this.#deriving.get(key);
    if (derived === undefined) {
      progressOf(request.reference)('derive', `deriving ${request.reference} from ${base}`);
      derived = buildRepositoryImage(requireImages(providerName, provider), {
        baseImage: base,
        reference: request.reference,
        workdir: request.workdir,
        files: request.files,
        command: request.command,
        env: request.env,
        // Listed with the images we built on every provider (Docker would inherit it anyway).
        ...(baseDefinition === undefined
          ? {}
          : { labels: { [IMAGE_DEFINITION_LABEL]: baseDefinition.name } }),
      })
        .then((result) => ({ name: request.reference, ...result }))
        .finally(() => this.#deriving.delete(key));
      this.#deriving.set(key, derived);
    }
    images.push(await derived);
    return { provider: providerName, images };
  }

  /**
   * Carries out a build plan on the provider (its base built first when it names a missing
   * built-in definition), unless the provider has the reference already. The upload's spooled
   * archives are disposed of by the caller.
   */
  async preparePlan(
    upload: PlanUpload,
    options: { onProgress?: (progress: ImageProgress) => void } = {},
  ): Promise<PrepareImageResponse> {
    const { request } = upload;
    const { name: providerName, provider } = this.#provider(request.provider);
    const builder = this.#builder(providerName, provider);
    const images = requireImageFormat(providerName, provider, 'plan', 'cannot build images from a plan');
    const prepared: PreparedImage[] = [];
    let base = request.base;
    const baseDefinition = findImageDefinition(request.base);
    if (baseDefinition !== undefined) {
      const built = await builder.build(baseDefinition, {
        onProgress: (stage, message) => options.onProgress?.({ image: baseDefinition.name, stage, message }),
      });
      if (built.built) prepared.push(built);
      base = built.reference;
    }
    const started = Date.now();
    const key = `${providerName}\0${request.reference}`;
    // Content-addressed: one that exists, or is being built, is that image.
    const running = this.#deriving.get(key);
    if (running !== undefined) {
      prepared.push(await running);
      return { provider: providerName, images: prepared };
    }
    if ((await images.inspectImage(request.reference)) !== null) {
      prepared.push({ name: request.reference, reference: request.reference, built: false, durationMs: 0 });
      return { provider: providerName, images: prepared };
    }
    options.onProgress?.({
      image: request.reference,
      stage: 'derive',
      message: `building ${request.reference} from ${base}`,
    });
    const steps: ImageBuildStep[] = request.steps.map((step, index) => {
      if (step.kind === 'run') return { ...step, env: step.env ?? {} };
      const archive = upload.archives.get(index)!;
      return {
        kind: 'files',
        path: step.path,
        archive: archive.open,
        entries: [...archive.topLevel],
        ...(step.chown === undefined ? {} : { chown: step.chown }),
        ...(step.chmod === undefined ? {} : { chmod: step.chmod }),
      };
    });
    const settings = request.settings ?? {};
    const build = images
      .prepareImage({
        format: 'plan',
        reference: request.reference,
        base,
        steps,
        ...(request.timeoutSeconds === undefined ? {} : { timeoutSeconds: request.timeoutSeconds }),
        settings: {
          ...settings,
          env: settings.env ?? {},
          labels: {
            ...(settings.labels ?? {}),
            ...(baseDefinition === undefined ? {} : { [IMAGE_DEFINITION_LABEL]: baseDefinition.name }),
          },
        },
      })
      .then(() => ({
        name: request.reference,
        reference: request.reference,
        built: true,
        durationMs: Date.now() - started,
      }))
      .finally(() => this.#deriving.delete(key));
    this.#deriving.set(key, build);
    prepared.push(await build);
    return { provider: providerName, images: prepared };
  }
}
