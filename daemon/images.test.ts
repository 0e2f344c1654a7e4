/**
 * The image routes and service over providers that cannot run anything: one without the image
 * part (refused as a capability it lacks), and one whose image part keeps what it is given in
 * memory (what the daemon asks of a provider, and when it does not ask at all). The real
 * preparation is tested against Docker by the contract's image cases.
 */
import type { Readable } from 'node:stream';
import * as tar from 'tar-stream';
import { afterEach, describe, expect, it } from 'vitest';
import { GymError } from '../core/errors.ts';
import { imageReference } from '../images/build.ts';
import { findImageDefinition } from '../images/definitions.ts';
import type {
  ImageFilter,
  ImageFormat,
  ImageInfo,
  ImageSource,
  ProviderContext,
} from '../providers/sandbox-provider.ts';
import { startTestDaemon, type TestDaemon } from '../test/daemon-harness.ts';
import { MemoryProvider } from '../test/fixtures/memory-provider.ts';
import { waitFor } from '../test/wait-for.ts';

/** The names of a tar stream's entries, read to its end. */
async function tarEntries(stream: Readable): Promise<string[]> {
  const extract = tar.extract();
  const names: string[] = [];
  const done = new Promise<void>((resolve, reject) => {
    extract.on('entry', (header, entry, next) => {
      names.push(header.name);
      entry.on('end', next);
      entry.resume();
    });
    extract.on('finish', resolve);
    extract.on('error', reject);
    stream.on('error', reject);
  });
  stream.pipe(extract);
  await done;
  return names;
}

/** A memory provider with an image part that records each source and keeps the images. */
class ImagingProvider extends MemoryProvider {
  readonly images = new Map<string, ImageInfo>();
  readonly prepared: Array<{ format: ImageFormat; reference: string; base?: string; entries?: string[] }> =
    [];
  /** Lets a test hold a preparation open. */
  gate: Promise<void> = Promise.resolve();
  /** Preparations begun (counted before the gate). */
  entered = 0;
  /** Thrown by the next derived preparation, as a failed recipe would. */
  failDerived: Error | undefined;

  constructor(context: ProviderContext, formats: ImageFormat[] = ['rootfs', 'derived', 'plan']) {
    super(context, { capabilities: { imageFormats: formats } });
  }

  async prepareImage(source: ImageSource): Promise<void> {
    this.entered += 1;
    await this.gate;
    if (source.format === 'rootfs') {
      this.prepared.push({
        format: 'rootfs',
        reference: source.reference,
        entries: await tarEntries(source.rootfs),
      });
      for (const reference of [source.reference, ...(source.aliases ?? [])])
        this.images.set(reference, { reference, labels: source.config.labels });
    } else if (source.format === 'plan') {
      const entries: string[] = [];
      for (const step of source.steps)
        if (step.kind === 'files')
          entries.push(...(await tarEntries(step.archive())).map((name) => `${step.path}:${name}`));
      this.prepared.push({ format: 'plan', reference: source.reference, base: source.base, entries });
      this.images.set(source.reference, { reference: source.reference, labels: source.settings.labels });
    } else if (source.format === 'derived') {
      const failure = this.failDerived;
      this.failDerived = undefined;
      if (failure !== undefined) throw failure;
      this.prepared.push({ format: 'derived', reference: source.reference, base: source.base });
      const base = this.images.get(source.base);
      this.images.set(source.reference, {
        reference: source.reference,
        labels: { ...base?.labels, ...source.labels },
      });
    }
  }

  async inspectImage(reference: string): Promise<ImageInfo | null> {
    return this.images.get(reference) ?? null;
  }

  async listImages(filter: ImageFilter = {}): Promise<ImageInfo[]> {
    return [...this.images.values()].filter((image) =>
      (filter.labelKeys ?? []).every((key) => key in image.labels),
    );
  }
}

let daemon: TestDaemon | undefined;
let imaging: ImagingProvider;

async function start(kind: 'memory' | 'imaging', formats?: ImageFormat[]): Promise<TestDaemon> {
  daemon = await startTestDaemon(
    { providers: [{ name: kind }] },
    {
      factories: {
        [kind]: (_options: unknown, context: ProviderContext) => {
          if (kind === 'memory') return new MemoryProvider(context);
          imaging = new ImagingProvider(context, formats);
          return imaging;
        },
      },
    },
  );
  return daemon;
}

afterEach(async () => {
  await daemon?.cleanup();
  daemon = undefined;
});

const busyboxReference = () => imageReference(findImageDefinition('busybox')!);

describe('image routes', () => {
  it('refuses images on a provider without the image part, naming the capability', async () => {
    const test = await start('memory');
    for (const [method, payload] of [
      ['GET', undefined],
      ['POST', { kind: 'definition', name: 'busybox' }],
    ] as const) {
      const response = await test.app.inject({ method, url: '/v1/images', headers: test.auth, payload });
      expect(response.statusCode, response.body).toBe(501);
      expect(response.json().error).toMatchObject({
        code: 'CAPABILITY_UNSUPPORTED',
        details: { provider: 'memory', capability: 'imageFormats' },
      });
    }
  });

  it('needs the token', async () => {
    const test = await start('memory');
    const response = await test.app.inject({ method: 'POST', url: '/v1/images', payload: {} });
    expect(response.statusCode).toBe(401);
  });

  it('builds a definition once: its reference is content-addressed, so the next request finds it', async () => {
    const test = await start('imaging');
    const reference = await busyboxReference();
    const first = await test.app.inject({
      method: 'POST',
      url: '/v1/images',
      headers: test.auth,
      payload: { kind: 'definition', name: 'busybox' },
    });
    expect(first.statusCode, first.body).toBe(200);
    expect(first.json()).toMatchObject({
      provider: 'imaging',
      images: [{ name: 'busybox', reference, built: true }],
    });
    expect(imaging.prepared).toHaveLength(1);
    // The provider got the builder's root filesystem as a tar stream.
    expect(imaging.prepared[0]!.entries).toEqual(expect.arrayContaining(['./bin/busybox', './etc/passwd']));
    expect(imaging.images.has('gym/busybox:latest')).toBe(true);

    const again = await test.app.inject({
      method: 'POST',
      url: '/v1/images',
      headers: test.auth,
      payload: { kind: 'definition', name: 'busybox' },
    });
    expect(again.json().images).toEqual([{ name: 'busybox', reference, built: false, durationMs: 0 }]);
    expect(imaging.prepared).toHaveLength(1);

    const listed = await test.app.inject({ method: 'GET', url: '/v1/images', headers: test.auth });
    expect(listed.statusCode).toBe(200);
    expect(listed.json().definitions).toEqual(
      expect.arrayContaining([expect.objectContaining({ name: 'busybox', reference, present: true })]),
    );
    expect(
      listed
        .json()
        .images.map((image: { reference: string }) => image.reference)
        .sort(),
    ).toEqual(['gym/busybox:latest', reference].sort());
  });

  it('derives an image from a definition, building the base first, and shares one build between callers', async () => {
    const test = await start('imaging');
    let open = () => {};
    imaging.gate = new Promise((resolve) => {
      open = resolve;
    });
    const request = {
      kind: 'derived',
      reference: 'gym/derived-test:abc123',
      base: 'busybox',
      workdir: '/testbed',
      files: { 'src/a.py': 'print(1)\n' },
      command: 'true',
    };
    const both = Promise.all(
      [1, 2].map(() =>
        test.app.inject({ method: 'POST', url: '/v1/images', headers: test.auth, payload: request }),
      ),
    );
    // Both requests are in before the first preparation ends.
    await waitFor('the first preparation', async () => (imaging.entered > 0 ? true : undefined), 5000);
    await new Promise((resolve) => setTimeout(resolve, 100));
    open();
    const [first, second] = await both;
    expect(first!.statusCode, first!.body).toBe(200);
    expect(second!.statusCode, second!.body).toBe(200);
    expect(imaging.prepared.map(({ format, reference, base }) => ({ format, reference, base }))).toEqual([
      { format: 'rootfs', reference: await busyboxReference(), base: undefined },
      { format: 'derived', reference: 'gym/derived-test:abc123', base: await busyboxReference() },
    ]);
  });

  it('streams each step of a build as NDJSON, then the result; refuses before streaming what it cannot do', async () => {
    const test = await start('imaging');
    const response = await test.app.inject({
      method: 'POST',
      url: '/v1/images?stream=ndjson',
      headers: test.auth,
      payload: { kind: 'definition', name: 'busybox' },
    });
    expect(response.statusCode, response.body).toBe(200);
    expect(response.headers['content-type']).toContain('application/x-ndjson');
    const events = response.body
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as { type: string; stage?: string; image?: string });
    expect(events.map((event) => [event.type, event.stage])).toEqual([
      ['progress', 'rootfs'],
      ['progress', 'prepare'],
      ['result', undefined],
    ]);
    expect(events[0]!.image).toBe('busybox');
    expect(events[2]).toMatchObject({
      result: { provider: 'imaging', images: [{ name: 'busybox', built: true }] },
    });

    const unknown = await test.app.inject({
      method: 'POST',
      url: '/v1/images?stream=ndjson',
      headers: test.auth,
      payload: { kind: 'definition', name: 'busybox', provider: 'nowhere' },
    });
    expect(unknown.statusCode).toBe(400);
    expect(unknown.json().error.code).toBe('PROVIDER_NOT_FOUND');

    // A failure once streaming is the last event, with its code.
    imaging.failDerived = new GymError('VALIDATION_FAILED', "the image's command failed with exit 3");
    const failed = await test.app.inject({
      method: 'POST',
      url: '/v1/images?stream=ndjson',
      headers: test.auth,
      payload: {
        kind: 'derived',
        reference: 'gym/fails:1',
        base: 'busybox',
        workdir: '/w',
        files: {},
        command: 'exit 3',
      },
    });
    const last = JSON.parse(failed.body.trim().split('\n').pop()!);
    expect(last).toMatchObject({ type: 'error', error: { code: 'VALIDATION_FAILED' } });
    expect(last.error.message).toContain('exit 3');
  });

  it('refuses derived images that would take a definition name or write outside their directory', async () => {
    const test = await start('imaging');
    const derived = (overrides: Record<string, unknown>) =>
      test.app.inject({
        method: 'POST',
        url: '/v1/images',
        headers: test.auth,
        payload: {
          kind: 'derived',
          reference: 'gym/ok:1',
          base: 'busybox',
          workdir: '/w',
          files: {},
          command: 'true',
          ...overrides,
        },
      });
    const named = await derived({ reference: 'gym/busybox:latest' });
    expect(named.statusCode).toBe(403);
    expect(named.json().error.code).toBe('FORBIDDEN_BY_CONFIG');
    for (const files of [{ '../escape': 'x' }, { '/etc/passwd': 'x' }, { 'a/../../b': 'x' }]) {
      const response = await derived({ files });
      expect(response.statusCode, JSON.stringify(files)).toBe(400);
      expect(response.json().error.code).toBe('VALIDATION_FAILED');
    }
    const elsewhere = await derived({ reference: 'library/ubuntu:latest' });
    expect(elsewhere.statusCode).toBe(400);
    expect(imaging.prepared.filter((item) => item.format === 'derived')).toEqual([]);
  });
});

/** A build plan's upload: plan.json, then each files step's tar (as `entries` name them). */
async function planUpload(
  plan: Record<string, unknown>,
  steps: Record<string, Array<Partial<tar.Header> & { name: string }>>,
): Promise<Buffer> {
  const bytes = async (fill: (pack: tar.Pack) => void) => {
    const pack = tar.pack();
    fill(pack);
    pack.finalize();
    const chunks: Buffer[] = [];
    for await (const chunk of pack as AsyncIterable<Buffer>) chunks.push(chunk);
    return Buffer.concat(chunks);
  };
  const inner = new Map<string, Buffer>();
  for (const [name, headers] of Object.entries(steps))
    inner.set(
      name,
      await bytes((pack) => {
        for (const header of headers)
          if (header.type === 'file') pack.entry(header, 'content');
          else pack.entry(header);
      }),
    );
  return bytes((pack) => {
    pack.entry({ name: 'plan.json' }, JSON.stringify(plan));
    for (const [name, content] of inner) pack.entry({ name }, content);
  });
}

describe('build plan uploads', () => {
  const plan = {
    kind: 'plan',
    reference: 'gym/plan-test:abc',
    base: 'some/base:1',
    steps: [
      { kind: 'run', argv: ['true'] },
      { kind: 'files', path: '/app', chown: '1000' },
    ],
    settings: { workdir: '/app' },
  };
  const upload = (payload: Buffer, test: TestDaemon) =>
    test.app.inject({
      method: 'POST',
      url: '/v1/images',
      headers: { ...test.auth, 'content-type': 'application/x-tar' },
      payload,
    });

  it('hands the provider each files step as a checked tar relative to its path', async () => {
    const test = await start('imaging');
    const response = await upload(
      await planUpload(plan, {
        'step-1.tar': [
          { name: 'src/', type: 'directory' },
          { name: 'src/main.py', type: 'file', size: 7 },
        ],
      }),
      test,
    );
    expect(response.statusCode, response.body).toBe(200);
    const streamed = await test.app.inject({
      method: 'POST',
      url: '/v1/images?stream=ndjson',
      headers: { ...test.auth, 'content-type': 'application/x-tar' },
      payload: await planUpload({ ...plan, reference: 'gym/plan-test:def' }, { 'step-1.tar': [] }),
    });
    const events = streamed.body
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line));
    expect(events.at(-1)).toMatchObject({
      type: 'result',
      result: { images: [{ reference: 'gym/plan-test:def', built: true }] },
    });
    imaging.prepared.pop();
    expect(imaging.prepared).toEqual([
      {
        format: 'plan',
        reference: 'gym/plan-test:abc',
        base: 'some/base:1',
        entries: ['/app:src', '/app:src/main.py'],
      },
    ]);
  });

  it('refuses a plan on a provider whose image part takes no plans, naming the format', async () => {
    const test = await start('imaging', ['rootfs', 'derived']);
    const response = await upload(await planUpload(plan, { 'step-1.tar': [] }), test);
    expect(response.statusCode, response.body).toBe(501);
    expect(response.json().error).toMatchObject({
      code: 'CAPABILITY_UNSUPPORTED',
      details: { provider: 'imaging', capability: 'imageFormats', format: 'plan' },
    });
    expect(response.json().error.message).toContain('cannot build images from a plan');
    expect(imaging.prepared).toEqual([]);
  });

  it("refuses an entry or a link that climbs out of its step's path, preparing nothing", async () => {
    const test = await start('imaging');
    for (const header of [
      { name: '../escape.txt', type: 'file', size: 7 },
      { name: 'link', type: 'symlink', linkname: '../../etc' },
    ] as Array<Partial<tar.Header> & { name: string }>) {
      const response = await upload(await planUpload(plan, { 'step-1.tar': [header] }), test);
      expect(response.statusCode, response.body).toBe(400);
      expect(response.json().error.code).toBe('ARCHIVE_UNSAFE');
    }
    const missing = await upload(await planUpload(plan, {}), test);
    expect(missing.json().error.message).toContain('missing step-1.tar');
    expect(imaging.prepared).toEqual([]);
  });
});
