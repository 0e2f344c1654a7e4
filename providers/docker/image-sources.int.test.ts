/**
 * Image sources on a real engine: a folder of `docker save` tarballs, and a registry mirror (the
 * Debian `docker-registry`, started here on loopback with a temporary storage directory; the
 * engine allows 127.0.0.0/8 registries without TLS). SWE-bench's image names, none of them on
 * the engine before.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createWriteStream, existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { afterAll, describe, expect, it } from 'vitest';
import { GymError } from '../../core/errors.ts';
import { ExecRequestSchema } from '../../core/schemas/exec.ts';
import { SandboxSpecSchema } from '../../core/schemas/sandbox.ts';
import { parseOrThrow } from '../../core/validate.ts';
import { dockerTestEnvironment, isDockerRequired, testImage } from '../../test/docker-available.ts';
import { testContext } from '../../test/fixtures/provider-context.ts';
import { waitFor } from '../../test/wait-for.ts';
import { DockerProvider } from './docker-provider.ts';
import { mirrorReference, tarballNames } from './image-sources.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const busybox = skipReason === undefined ? await testImage(docker, 'busybox') : 'gym/busybox:missing';
const REGISTRY = '/usr/bin/docker-registry';
const registryMissing = existsSync(REGISTRY)
  ? undefined
  : 'docker-registry is not installed (scripts/setup.sh installs it)';
if (registryMissing !== undefined && isDockerRequired)
  throw new Error(`GYM_REQUIRE_DOCKER=1 but ${registryMissing}`);

describe('image source names', () => {
  it("tries the reference's flat name, then without :latest, then the name's last part", () => {
    expect(tarballNames('swebench/sweb.eval.x86_64.django_1776_django-11099:latest')).toEqual([
      'swebench_sweb.eval.x86_64.django_1776_django-11099_latest.tar',
      'swebench_sweb.eval.x86_64.django_1776_django-11099_latest.tar.gz',
      'swebench_sweb.eval.x86_64.django_1776_django-11099.tar',
      'swebench_sweb.eval.x86_64.django_1776_django-11099.tar.gz',
      'sweb.eval.x86_64.django_1776_django-11099.tar',
      'sweb.eval.x86_64.django_1776_django-11099.tar.gz',
    ]);
    // A reference is a row's: it never names a path out of the folder.
    expect(tarballNames('../../etc/passwd:x').every((name) => !name.includes('/'))).toBe(true);
    expect(tarballNames('gym/x@sha256:abc')).toEqual([]);
    expect(mirrorReference('127.0.0.1:5000', 'swebench/sweb.eval.x:v1')).toBe(
      '127.0.0.1:5000/swebench/sweb.eval.x:v1',
    );
    expect(mirrorReference('mirror.internal/swe', 'other.host:443/team/image')).toBe(
      'mirror.internal/swe/team/image:latest',
    );
  });
});

describe.skipIf(skipReason !== undefined)('image sources (docker)', () => {
  const suffix = randomBytes(4).toString('hex');
  const references: string[] = [];
  const directories: string[] = [];
  const providers: DockerProvider[] = [];
  let registry: ChildProcess | undefined;

  /** A SWE-bench-named image of this test (busybox under another name), not on the engine afterwards. */
  const sweBenchName = (instance: string) => {
    const reference = `swebench/sweb.eval.x86_64.gymtest_1776_${instance}-${suffix}:latest`;
    references.push(reference);
    return reference;
  };
  const spec = (image: string) => parseOrThrow(SandboxSpecSchema, { image }, 'spec');
  const provider = (imageSources: Record<string, string>) => {
    // A namespace of this file's own: its cleanup lists the namespace and destroys all it finds,
    // which under the shared 'test' namespace took the sandboxes of other files running at once.
    const created = new DockerProvider(docker, testContext({ namespace: `imgsrc-${suffix}` }), {
      imageSources,
    });
    providers.push(created);
    return created;
  };
  const tag = async (reference: string) => {
    const colon = reference.lastIndexOf(':');
    await docker.getImage(busybox).tag({ repo: reference.slice(0, colon), tag: reference.slice(colon + 1) });
  };
  const untag = (reference: string) =>
    docker
      .getImage(reference)
      .remove()
      .catch(() => {});

  afterAll(async () => {
    for (const created of providers) {
      const { sandboxes } = await created.list();
      await Promise.all(sandboxes.map((sandbox) => created.destroy(sandbox.id)));
      await created.close();
    }
    for (const reference of references) await untag(reference);
    registry?.kill('SIGTERM');
    for (const directory of directories) await rm(directory, { recursive: true, force: true });
  });

  it('loads a missing SWE-bench image from its docker save tarball, once for concurrent creates', async () => {
    const directory = await mkdtemp(join(tmpdir(), 'gym-tarballs-'));
    directories.push(directory);
    const reference = sweBenchName('tarball');
    await tag(reference);
    await pipeline(
      await docker.getImage(reference).get(),
      createWriteStream(join(directory, `sweb.eval.x86_64.gymtest_1776_tarball-${suffix}.tar`)),
    );
    await untag(reference);
    const sources = provider({ tarballDirectory: directory });
    const [first, second] = await Promise.all([
      sources.create(spec(reference)),
      sources.create(spec(reference)),
    ]);
    const result = await sources.exec(
      first.id,
      parseOrThrow(ExecRequestSchema, { command: 'echo loaded' }, 'exec'),
    );
    expect(result).toMatchObject({ status: 'ok', stdout: 'loaded\n' });
    expect(second.image).toBe(reference);

    // Not in the folder: a clear IMAGE_NOT_FOUND saying where it was looked for.
    const missing = sweBenchName('absent');
    const error = (await sources.create(spec(missing)).catch((caught: unknown) => caught)) as GymError;
    expect(error).toBeInstanceOf(GymError);
    expect(error.code).toBe('IMAGE_NOT_FOUND');
    expect(error.message).toContain(`no tarball in ${directory}`);

    // A tarball that holds another image: loaded, and refused by name.
    const wrong = sweBenchName('wrong');
    await pipeline(
      await docker.getImage(busybox).get(),
      createWriteStream(join(directory, `sweb.eval.x86_64.gymtest_1776_wrong-${suffix}.tar`)),
    );
    const refused = (await sources.create(spec(wrong)).catch((caught: unknown) => caught)) as GymError;
    expect(refused.code).toBe('IMAGE_NOT_FOUND');
    expect(refused.message).toContain(`holds no image "${wrong}"`);
  }, 120_000);

  it.skipIf(registryMissing !== undefined)(
    'pulls a missing image from the configured mirror only, and tags it under its own name',
    async () => {
      const storage = await mkdtemp(join(tmpdir(), 'gym-registry-'));
      directories.push(storage);
      const port = await new Promise<number>((resolve) => {
        const server = createServer().listen(0, '127.0.0.1', () => {
          const { port: free } = server.address() as { port: number };
          server.close(() => resolve(free));
        });
      });
      const config = join(storage, 'config.yml');
      await writeFile(
        config,
        [
          'version: 0.1',
          'log: { level: error }',
          `storage: { filesystem: { rootdirectory: ${join(storage, 'data')} } }`,
          `http: { addr: 127.0.0.1:${port} }`,
          '',
        ].join('\n'),
      );
      registry = spawn(REGISTRY, ['serve', config], { stdio: 'ignore' });
      const mirror = `127.0.0.1:${port}`;
      await waitFor(
        'the registry',
        () =>
          fetch(`http://${mirror}/v2/`).then(
            (response) => response.ok || undefined,
            () => undefined,
          ),
        20_000,
      );
      const reference = sweBenchName('mirror');
      const onMirror = mirrorReference(mirror, reference)!;
      references.push(onMirror);
      await tag(onMirror);
      // The engine asks for an auth header even where the registry wants none.
      const pushed = await docker.getImage(onMirror).push({ authconfig: { serveraddress: mirror } });
      await new Promise<void>((resolve, reject) =>
        docker.modem.followProgress(pushed, (error) => (error ? reject(error) : resolve())),
      );
      await untag(onMirror);

      // Without a mirror configured nothing is pulled, though a registry has the image.
      const none = (await provider({})
        .create(spec(reference))
        .catch((caught: unknown) => caught)) as GymError;
      expect(none.code).toBe('IMAGE_NOT_FOUND');

      const sources = provider({ registryMirror: mirror });
      const sandbox = await sources.create(spec(reference));
      expect(
        await sources.exec(sandbox.id, parseOrThrow(ExecRequestSchema, { command: 'echo pulled' }, 'exec')),
      ).toMatchObject({ status: 'ok', stdout: 'pulled\n' });
      expect(await docker.getImage(reference).inspect()).toBeDefined();

      const absent = sweBenchName('not-pushed');
      const error = (await sources.create(spec(absent)).catch((caught: unknown) => caught)) as GymError;
      expect(error.code).toBe('IMAGE_NOT_FOUND');
      expect(error.message).toContain(`not on the mirror ${mirror}`);
    },
    120_000,
  );
});
