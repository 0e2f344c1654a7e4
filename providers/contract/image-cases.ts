/**
 * The image part (`prepareImage`, `inspectImage`, `listImages`), for a provider that declares
 * `imageFormats`: a root filesystem becomes an image a sandbox starts from with its config, a
 * derived image holds its files and what its command made, and a failed preparation leaves no
 * image behind. The root filesystem is the registry-free builder's busybox one (Debian's
 * `busybox-static` at /bin/busybox), so the cases take a second or two.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import * as tar from 'tar-stream';
import { expect, it } from 'vitest';
import { busyboxRoot, rootfsTar } from '../../images/build.ts';
import type { BusyboxImageDefinition } from '../../images/definitions.ts';
import { findImageDefinition } from '../../images/definitions.ts';
import type { ImageFormat, SandboxProvider } from '../sandbox-provider.ts';
import { expectGymError, type SandboxFixture } from './fixture.ts';

/** The label every image of these cases carries, valued with the run's id. */
const RUN_LABEL = 'gym.contract-run';

function hasFormat(provider: SandboxProvider, format: ImageFormat): boolean {
  return (provider.capabilities.imageFormats ?? []).includes(format);
}

/**
 * Whether a case for `format` is registered: not when the author declared capabilities without
 * it (absent `imageFormats` is none, as on a provider; a skipped case fails a strict CI), else
 * it is, and skips at run time if the built provider lacks it.
 */
function mayHave(fixture: SandboxFixture, format: ImageFormat): boolean {
  const declared = fixture.options.capabilities;
  return declared === undefined || (declared.imageFormats ?? []).includes(format);
}

export function defineImageCases(fixture: SandboxFixture): void {
  const made: string[] = [];
  const removeMade = async () => {
    for (const image of made.splice(0)) await fixture.options.removeImage?.(image).catch(() => {});
  };

  it('declares image formats exactly when it has the three image operations', () => {
    const { provider } = fixture;
    const formats = provider.capabilities.imageFormats ?? [];
    if (formats.length === 0) return;
    expect(typeof provider.prepareImage).toBe('function');
    expect(typeof provider.inspectImage).toBe('function');
    expect(typeof provider.listImages).toBe('function');
    for (const format of formats) expect(['rootfs', 'derived', 'plan']).toContain(format);
  });

  if (mayHave(fixture, 'rootfs'))
    it('prepares a root filesystem into an image that sandboxes start from, with its config and labels', async (context) => {
      const { provider } = fixture;
      if (!hasFormat(provider, 'rootfs')) return context.skip();
      const reference = `gym-contract/rootfs-${fixture.runId}:${fixture.runId}`;
      const alias = `gym-contract/rootfs-${fixture.runId}:alias`;
      const directory = await mkdtemp(join(tmpdir(), 'gym-contract-rootfs-'));
      try {
        expect(await provider.inspectImage!(reference)).toBeNull();
        const root = join(directory, 'rootfs');
        await busyboxRoot(findImageDefinition('busybox') as BusyboxImageDefinition, root);
        await writeFile(join(root, 'etc/contract-marker'), `made by run ${fixture.runId}\n`);
        made.push(alias, reference);
        await provider.prepareImage!({
          format: 'rootfs',
          reference,
          rootfs: rootfsTar(root),
          config: {
            env: { CONTRACT_IMAGE_ENV: 'from the image' },
            cmd: ['/bin/sh'],
            labels: { [RUN_LABEL]: fixture.runId },
          },
          aliases: [alias],
        });
        const inspected = await provider.inspectImage!(reference);
        expect(inspected?.reference).toBe(reference);
        expect(inspected?.labels[RUN_LABEL]).toBe(fixture.runId);
        const listed = await provider.listImages!({ labelKeys: [RUN_LABEL] });
        const ours = listed.filter((image) => image.labels[RUN_LABEL] === fixture.runId);
        expect(ours.map((image) => image.reference).sort()).toEqual([alias, reference].sort());

        const sandbox = await fixture.create({ image: reference });
        const result = await fixture.exec(sandbox.id, {
          command: 'cat /etc/contract-marker; echo "$CONTRACT_IMAGE_ENV"',
        });
        expect(result).toMatchObject({
          status: 'ok',
          exitCode: 0,
          stdout: `made by run ${fixture.runId}\nfrom the image\n`,
        });
      } finally {
        await fixture.cleanup();
        await rm(directory, { recursive: true, force: true });
        await removeMade();
      }
    });

  if (mayHave(fixture, 'derived'))
    it('derives an image from a base: files written into a directory, a command run there', async (context) => {
      const { provider } = fixture;
      if (!hasFormat(provider, 'derived')) return context.skip();
      const reference = `gym-contract/derived-${fixture.runId}:${fixture.runId}`;
      try {
        made.push(reference);
        await provider.prepareImage!({
          format: 'derived',
          reference,
          base: fixture.options.image,
          workdir: '/contract/work',
          files: { 'a.txt': 'hello ', 'sub/b.txt': 'world' },
          command: 'cat a.txt sub/b.txt > joined.txt && echo "$DERIVE_ENV" > env.txt',
          env: { DERIVE_ENV: 'only while deriving' },
          labels: { [RUN_LABEL]: fixture.runId },
        });
        expect((await provider.inspectImage!(reference))?.labels[RUN_LABEL]).toBe(fixture.runId);
        const sandbox = await fixture.create({ image: reference });
        const result = await fixture.exec(sandbox.id, {
          command:
            'cat /contract/work/joined.txt; echo; cat /contract/work/env.txt; echo "${DERIVE_ENV:-unset}"',
        });
        expect(result).toMatchObject({
          status: 'ok',
          stdout: 'hello world\nonly while deriving\nunset\n',
        });
      } finally {
        await fixture.cleanup();
        await removeMade();
      }
    });

  if (mayHave(fixture, 'derived'))
    it('leaves no image behind when a derived image fails, and names a missing base', async (context) => {
      const { provider } = fixture;
      if (!hasFormat(provider, 'derived')) return context.skip();
      const failing = `gym-contract/failing-${fixture.runId}:${fixture.runId}`;
      made.push(failing);
      try {
        const error = await expectGymError(
          provider.prepareImage!({
            format: 'derived',
            reference: failing,
            base: fixture.options.image,
            workdir: '/contract/work',
            files: {},
            command: 'echo the recipe is wrong >&2; exit 3',
            env: {},
            labels: {},
          }),
          'VALIDATION_FAILED',
        );
        expect(error.message).toContain('the recipe is wrong');
        expect(await provider.inspectImage!(failing)).toBeNull();
        await expectGymError(
          provider.prepareImage!({
            format: 'derived',
            reference: failing,
            base: `gym-contract/no-such-base-${fixture.runId}:none`,
            workdir: '/contract/work',
            files: {},
            command: 'true',
            env: {},
            labels: {},
          }),
          'IMAGE_NOT_FOUND',
        );
      } finally {
        await removeMade();
      }
    });

  if (mayHave(fixture, 'plan'))
    it('builds a plan: files unpacked with owner and mode, steps run, a sandbox starts in its workdir with its env', async (context) => {
      const { provider } = fixture;
      if (!hasFormat(provider, 'plan')) return context.skip();
      const reference = `gym-contract/plan-${fixture.runId}:${fixture.runId}`;
      const files = await tarOf({ 'hello.txt': 'hello from the context\n', 'sub/deep.txt': 'deep\n' });
      try {
        made.push(reference);
        await provider.prepareImage!({
          format: 'plan',
          reference,
          base: fixture.options.image,
          steps: [
            { kind: 'run', argv: ['mkdir', '-p', '/contract/app'], env: {}, user: '0' },
            {
              kind: 'files',
              path: '/contract/app',
              archive: () => Readable.from(files),
              entries: ['hello.txt', 'sub'],
              chown: '1234:1234',
              chmod: '640',
            },
            {
              kind: 'run',
              argv: ['sh', '-c', 'cat hello.txt sub/deep.txt > made.txt && echo "$STEP_ENV" >> made.txt'],
              workdir: '/contract/app',
              env: { STEP_ENV: 'only while building' },
            },
          ],
          settings: {
            env: { PLAN_ENV: 'from the plan' },
            workdir: '/contract/app',
            labels: { [RUN_LABEL]: fixture.runId },
          },
        });
        const inspected = await provider.inspectImage!(reference);
        expect(inspected?.labels[RUN_LABEL]).toBe(fixture.runId);
        expect(inspected?.workdir).toBe('/contract/app');
        const sandbox = await fixture.create({ image: reference });
        const result = await fixture.exec(sandbox.id, {
          command:
            'pwd; echo "$PLAN_ENV ${STEP_ENV:-unset}"; cat made.txt; stat -c %u:%g:%a hello.txt sub/deep.txt',
        });
        expect(result).toMatchObject({
          status: 'ok',
          stdout:
            '/contract/app\nfrom the plan unset\nhello from the context\ndeep\nonly while building\n1234:1234:640\n1234:1234:640\n',
        });
      } finally {
        await fixture.cleanup();
        await removeMade();
      }
    });

  if (mayHave(fixture, 'plan'))
    it('leaves neither image nor build container when a plan step fails or runs past its time, and says which step', async (context) => {
      const { provider } = fixture;
      if (!hasFormat(provider, 'plan')) return context.skip();
      const failing = `gym-contract/plan-failing-${fixture.runId}:${fixture.runId}`;
      made.push(failing);
      try {
        const error = await expectGymError(
          provider.prepareImage!({
            format: 'plan',
            reference: failing,
            base: fixture.options.image,
            steps: [
              { kind: 'run', argv: ['sh', '-c', 'touch /made-before'], env: {} },
              { kind: 'run', argv: ['sh', '-c', 'echo the step is wrong >&2; exit 4'], env: {} },
            ],
            settings: { env: {}, labels: {} },
          }),
          'VALIDATION_FAILED',
        );
        expect(error.message).toContain('the step is wrong');
        expect(error.details).toMatchObject({ step: 1 });
        expect(await provider.inspectImage!(failing)).toBeNull();
        if (fixture.options.buildLeftovers !== undefined)
          expect(await fixture.options.buildLeftovers(failing)).toBe(0);
        const slow = await expectGymError(
          provider.prepareImage!({
            format: 'plan',
            reference: failing,
            base: fixture.options.image,
            steps: [{ kind: 'run', argv: ['sleep', '60'], env: {} }],
            settings: { env: {}, labels: {} },
            timeoutSeconds: 1,
          }),
          'VALIDATION_FAILED',
        );
        expect(slow.message).toContain('ran past 1 s');
        expect(await provider.inspectImage!(failing)).toBeNull();
        if (fixture.options.buildLeftovers !== undefined)
          expect(await fixture.options.buildLeftovers(failing)).toBe(0);
      } finally {
        await removeMade();
      }
    });
}

/** A tar of the given files (directories made for them), as bytes. */
async function tarOf(files: Record<string, string>): Promise<Buffer> {
  const pack = tar.pack();
  const directories = new Set<string>();
  for (const [name, content] of Object.entries(files)) {
    const parts = name.split('/').slice(0, -1);
    for (let index = 1; index <= parts.length; index += 1) {
      const directory = parts.slice(0, index).join('/');
      if (directories.has(directory)) continue;
      directories.add(directory);
      pack.entry({ name: `${directory}/`, type: 'directory', mode: 0o755 });
    }
    pack.entry({ name, mode: 0o644 }, content);
  }
  pack.finalize();
  const chunks: Buffer[] = [];
  for await (const chunk of pack as AsyncIterable<Buffer>) chunks.push(chunk);
  return Buffer.concat(chunks);
}
