/**
 * The images of an SSH runtime: `prepareImage` keeps the builder's root filesystem in the
 * daemon's state directory (in the runtime's format) and copies it to every host that answers
 * (`<workDirectory>/images/<reference><suffix>`, with its config beside it); a host that lacks
 * it gets it at its first create. Named by the content-addressed reference, an image is copied
 * to a host once, whichever daemon asks. Derived images (a base, files, a command: the swe-mini
 * task images) are made on each host by the runtime's steps; the recipe is kept here for hosts
 * that were down.
 */
import { randomBytes } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { copyFile, mkdir, readFile, writeFile } from 'node:fs/promises';
import { join, posix } from 'node:path';
import { Readable } from 'node:stream';
import * as tar from 'tar-stream';
import { type ErrorCode, GymError } from '../../core/errors.ts';
import type {
  DerivedImageSource,
  ImageConfig,
  ImageFilter,
  ImageInfo,
  ImageSource,
  ProviderContext,
} from '../sandbox-provider.ts';
import {
  type ImageRecord,
  imageFolderName,
  listImageRecords,
  readImageRecord,
  writeImageRecord,
} from '../shared/image-folder.ts';
import { shellJoin } from '../shared/shell.ts';
import type { FleetHost, HostConfig, HostFleet } from '../ssh/host-fleet.ts';
import type { SlurmHosts } from '../ssh/slurm-hosts.ts';
import { DEFAULT_PATH, type RuntimeImageFormat } from './driver.ts';

/** The files of a derived image as a tar, by their paths relative to its working directory. */
function packFiles(files: Record<string, string>): Readable {
  const pack = tar.pack();
  for (const [path, content] of Object.entries(files)) pack.entry({ name: path, mode: 0o644 }, content);
  pack.finalize();
  return Readable.from(pack as AsyncIterable<Buffer>);
}

export class SshImageStore<H extends HostConfig> {
  /** How many times an image was copied to a host (tests count it). */
  copies = 0;
  /** How many derived images were made on a host (tests count it). */
  builds = 0;
  readonly #runtime: string;
  readonly #format: RuntimeImageFormat<H>;
  readonly #context: ProviderContext;
  readonly #fleet: HostFleet<H>;
  readonly #slurm: SlurmHosts | null;

  constructor(
    runtime: string,
    format: RuntimeImageFormat<H>,
    context: ProviderContext,
    fleet: HostFleet<H>,
    slurm: SlurmHosts | null,
  ) {
    this.#runtime = runtime;
    this.#format = format;
    this.#context = context;
    this.#fleet = fleet;
    this.#slurm = slurm;
  }

  /** The image's path on a host. */
  hostPath(host: FleetHost<H>, reference: string): string {
    return `${posix.join(host.workDirectory, 'images', imageFolderName(reference))}${this.#format.hostSuffix}`;
  }

  /** Where this daemon keeps what it prepared, to copy it to a host that lacks it. */
  #cachePath(reference: string): string {
    return join(this.#context.stateDirectory, 'images', imageFolderName(reference));
  }

  #test(host: FleetHost<H>, reference: string): string {
    return `test ${this.#format.hostTest} ${shellJoin([this.hostPath(host, reference)])}`;
  }

  /** Exits non-zero when the host lacks the image, else prints its config (or nothing, for an operator's). */
  #readLine(host: FleetHost<H>, reference: string): string {
    const record = shellJoin([`${this.hostPath(host, reference)}.image.json`]);
    return `${this.#test(host, reference)} && { cat ${record} 2>/dev/null; true; }`;
  }

  #now(): string {
    return new Date(this.#context.clock.now()).toISOString();
  }

  /**
   * Makes sure `reference` is on the host, copying it there from this daemon's cache when it is
   * not (once per host: a second create or a second daemon finds it); returns its config.
   * IMAGE_NOT_FOUND when neither has it.
   */
  async ensure(host: FleetHost<H>, reference: string): Promise<ImageConfig> {
    const present = await this.#fleet.run(host, this.#readLine(host, reference));
    if (present.code !== 0) {
      const recipe = await readFile(`${this.#cachePath(reference)}.derived.json`, 'utf8').catch(() => null);
      if (recipe !== null) return this.#build(host, JSON.parse(recipe) as DerivedImageSource);
      const cached = await readImageRecord(this.#cachePath(reference));
      if (cached === null)
        throw new GymError(
          'IMAGE_NOT_FOUND',
          `image ${reference} is not on host ${host.name} (no ${this.hostPath(host, reference)}) and this daemon has not prepared it (gym image build)`,
          { details: { image: reference, host: host.name } },
        );
      await this.#upload(host, reference, cached);
      return cached.config;
    }
    const text = present.stdout.toString().trim();
    return text === '' ? { env: {}, labels: {} } : (JSON.parse(text) as ImageRecord).config;
  }

  /** Copies a cached image to a host: made beside, then renamed into place. */
  async #upload(host: FleetHost<H>, reference: string, record: ImageRecord): Promise<void> {
    const target = this.hostPath(host, reference);
    const partial = `${target}.partial-${randomBytes(4).toString('hex')}`;
    const [quotedPartial, quotedTarget] = [shellJoin([partial]), shellJoin([target])];
    const copied = await this.#fleet.run(
      host,
      `${this.#format.unpackLine(partial, target)} && { [ ${this.#format.hostTest} ${quotedTarget} ] && rm -rf ${quotedPartial} || mv ${quotedPartial} ${quotedTarget}; }`,
      createReadStream(`${this.#cachePath(reference)}${this.#format.cacheSuffix}`),
    );
    if (copied.code !== 0) {
      await this.#fleet.run(host, `rm -rf ${quotedPartial}`).catch(() => {});
      throw new GymError(
        'PROVIDER_ERROR',
        `copying image ${reference} to ${host.name} failed: ${copied.stderr.trim()}`,
      );
    }
    const saved = await this.#fleet.run(
      host,
      `cat > ${shellJoin([`${target}.image.json`])}`,
      Buffer.from(JSON.stringify(record)),
    );
    if (saved.code !== 0)
      throw new GymError('PROVIDER_ERROR', `writing ${target}.image.json failed: ${saved.stderr.trim()}`);
    this.copies += 1;
  }

  /**
   * Makes a derived image on a host by the runtime's steps (its base made sure of first), then
   * renames it into place with its config; returns that config. A failing command is
   * VALIDATION_FAILED (the recipe is the task's), anything else PROVIDER_ERROR.
   */
  async #build(host: FleetHost<H>, source: DerivedImageSource): Promise<ImageConfig> {
    const baseConfig = await this.ensure(host, source.base);
    const config: ImageConfig = {
      env: baseConfig.env,
      workdir: source.workdir,
      ...(baseConfig.cmd === undefined ? {} : { cmd: baseConfig.cmd }),
      labels: { ...baseConfig.labels, ...source.labels },
    };
    const target = this.hostPath(host, source.reference);
    const partial = `${target}.partial-${randomBytes(4).toString('hex')}`;
    const environment = [
      `PATH=${DEFAULT_PATH}`,
      'HOME=/root',
      ...Object.entries({ ...baseConfig.env, ...source.env }).map(([key, value]) => `${key}=${value}`),
    ];
    const steps = this.#format.derivedSteps(
      host,
      source,
      this.hostPath(host, source.base),
      partial,
      environment,
    );
    const fail = async (why: string, code: ErrorCode = 'PROVIDER_ERROR'): Promise<never> => {
      await this.#fleet.run(host, steps.cleanup).catch(() => {});
      throw new GymError(code, `making image ${source.reference} on ${host.name}: ${why}`);
    };
    const prepared = await this.#fleet.run(host, steps.prepare, packFiles(source.files));
    if (prepared.code !== 0) await fail(`making it from the base failed: ${prepared.stderr.trim()}`);
    let output = '';
    const keep = (chunk: Buffer) => {
      output = (output + chunk.toString()).slice(-4000);
    };
    const ran = await host.connection.exec(steps.run, { onStdout: keep, onStderr: keep });
    if (ran.code !== 0)
      await fail(`the command failed (exit ${ran.code ?? ran.signal}): ${output}`, 'VALIDATION_FAILED');
    const record: ImageRecord = { reference: source.reference, config, createdAt: this.#now() };
    const [from, to] = [`${partial}.image.json`, `${target}.image.json`];
    const placed = await this.#fleet.run(
      host,
      `${steps.seal === null ? '' : `${steps.seal} && `}cat > ${shellJoin([from])} && if [ ${this.#format.hostTest} ${shellJoin([target])} ]; then rm -rf ${shellJoin([partial, from])}; else mv ${shellJoin([partial, target])} && mv ${shellJoin([from, to])}; fi`,
      Buffer.from(JSON.stringify(record)),
    );
    if (placed.code !== 0) await fail(`putting it in place failed: ${placed.stderr.trim()}`);
    this.builds += 1;
    return config;
  }

  async #prepareDerived(source: DerivedImageSource): Promise<void> {
    await mkdir(join(this.#context.stateDirectory, 'images'), { recursive: true, mode: 0o700 });
    const build = () =>
      Promise.all(
        this.#fleet.hosts.map(async (host) => {
          const has = await this.#fleet.run(host, this.#test(host, source.reference)).catch(() => null);
          if (has === null) return null;
          return has.code === 0 ? this.ensure(host, source.reference) : this.#build(host, source);
        }),
      );
    // In Slurm mode it is made on the allocation's nodes: one is asked for when none is held.
    const built = await (this.#slurm === null ? build() : this.#slurm.pinned(build));
    const config = built.find((entry) => entry !== null);
    if (config === undefined) throw new GymError('PROVIDER_UNAVAILABLE', `no ${this.#runtime} host answers`);
    // The recipe is kept here, so a host that is down now makes the image at its first create.
    const cache = this.#cachePath(source.reference);
    await writeFile(`${cache}.derived.json`, JSON.stringify(source), { mode: 0o600 });
    await writeImageRecord(cache, { reference: source.reference, config, createdAt: this.#now() });
  }

  async prepare(source: ImageSource): Promise<void> {
    if (source.format === 'derived') return this.#prepareDerived(source);
    if (source.format !== 'rootfs')
      throw new GymError(
        'CAPABILITY_UNSUPPORTED',
        `the ${this.#runtime} provider prepares no ${source.format} images`,
        { details: { provider: this.#runtime, capability: 'imageFormats' } },
      );
    // Kept here, so a host that is down now, or added later, gets the image at its first create.
    await mkdir(join(this.#context.stateDirectory, 'images'), { recursive: true, mode: 0o700 });
    const suffix = this.#format.cacheSuffix;
    const cache = `${this.#cachePath(source.reference)}${suffix}`;
    await this.#format.keepRootfs(cache, source.rootfs);
    const createdAt = this.#now();
    const references = [source.reference, ...(source.aliases ?? [])];
    for (const reference of references) {
      const record: ImageRecord = { reference, config: source.config, createdAt };
      if (reference !== source.reference) await copyFile(cache, `${this.#cachePath(reference)}${suffix}`);
      await writeImageRecord(this.#cachePath(reference), record);
    }
    // Copied to every host that answers now; a host that does not gets it at its first create.
    await Promise.all(
      this.#fleet.hosts.map(async (host) => {
        for (const reference of references) {
          const has = await this.#fleet.run(host, this.#test(host, reference)).catch(() => null);
          if (has === null || has.code === 0) continue;
          await this.#upload(host, reference, { reference, config: source.config, createdAt });
        }
      }),
    );
  }

  async inspect(reference: string): Promise<ImageInfo | null> {
    const cached = await readImageRecord(this.#cachePath(reference));
    if (cached !== null) return { reference, labels: cached.config.labels, createdAt: cached.createdAt };
    // An image an operator (or another daemon) put on a host is one too.
    for (const host of this.#fleet.hosts) {
      const found = await this.#fleet.run(host, this.#readLine(host, reference)).catch(() => null);
      if (found === null || found.code !== 0) continue;
      const text = found.stdout.toString().trim();
      const record = text === '' ? null : (JSON.parse(text) as ImageRecord);
      return {
        reference,
        labels: record?.config.labels ?? {},
        ...(record ? { createdAt: record.createdAt } : {}),
      };
    }
    return null;
  }

  list(filter: ImageFilter = {}): Promise<ImageInfo[]> {
    return listImageRecords(join(this.#context.stateDirectory, 'images'), filter);
  }
}
