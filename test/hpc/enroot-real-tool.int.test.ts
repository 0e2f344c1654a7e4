/**
 * The enroot provider where the real enroot differs from a plain container runtime, on a node whose
 * stand-in reproduces it (test/stand-ins/enroot-start.ts): `start` runs the command through the
 * container's login shell (the image's /etc/profile, root's home folder) unless told not to, and
 * its hooks rewrite /etc/passwd and /etc/group and add an apt configuration file at every start,
 * which `export` keeps.
 */
import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { silentLogger } from '../../core/logger.ts';
import { ExecRequestSchema } from '../../core/schemas/exec.ts';
import { SandboxSpecSchema } from '../../core/schemas/sandbox.ts';
import { parseOrThrow } from '../../core/validate.ts';
import { EnrootProvider } from '../../providers/enroot/enroot-provider.ts';
import { imageFolderName } from '../../providers/shared/image-folder.ts';
import { BUSYBOX_REFERENCE, makeBusyboxRoot } from '../fixtures/busybox-root.ts';
import { testContext } from '../fixtures/provider-context.ts';
import { enrootNode } from './enroot-node.ts';

const node = await enrootNode('127.0.0.37', 37000 + (process.pid % 1000));
const stateDirectory = await mkdtemp(join(tmpdir(), 'gym-enroot-real-'));
const scratch = await mkdtemp(join(tmpdir(), 'gym-enroot-real-roots-'));
const provider = new EnrootProvider(
  { hosts: [node.host] },
  testContext({ logger: silentLogger, stateDirectory }),
);
afterAll(async () => {
  await provider.close();
  await node.cleanup();
  await rm(stateDirectory, { recursive: true, force: true });
  await rm(scratch, { recursive: true, force: true });
});

/** The busybox root as image `reference`, changed by `change` (given the root's folder) first. */
async function placeBusybox(reference: string, change: (root: string) => Promise<void>): Promise<void> {
  const folder = join(scratch, reference.replace(/\W/g, '-'));
  await makeBusyboxRoot(folder);
  const root = join(folder, imageFolderName(BUSYBOX_REFERENCE));
  await change(root);
  await node.placeImage(root, reference);
}

const run = (id: string, command: string) =>
  provider.exec(id, parseOrThrow(ExecRequestSchema, { command, timeoutMs: 30_000 }, 'exec'));

it('starts an image whose /etc/profile fails and that has no home folder for root', async () => {
  const reference = 'gym-test/no-login:1';
  await placeBusybox(reference, async (root) => {
    await rm(join(root, 'root'), { recursive: true });
    await writeFile(join(root, 'etc', 'profile'), 'echo "a login shell read this" >&2\nexit 3\n');
  });
  const sandbox = await provider.create(parseOrThrow(SandboxSpecSchema, { image: reference }, 'spec'));
  try {
    expect(await run(sandbox.id, 'echo inside')).toMatchObject({ status: 'ok', stdout: 'inside\n' });
  } finally {
    await provider.destroy(sandbox.id);
  }
});

it("derives an image that keeps its command's changes to /etc but none of the hooks'", async () => {
  const base = 'gym-test/debian-like:1';
  const passwd = 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n';
  await placeBusybox(base, async (root) => {
    await writeFile(join(root, 'etc', 'debian_version'), '12.0\n');
    await writeFile(join(root, 'etc', 'group'), 'root:x:0:\n');
    // 10-shadow makes the SSH user's home folder (root's, here) when the root lacks it.
    await rm(join(root, 'root'), { recursive: true });
  });
  const derived = 'gym-test/debian-like-derived:1';
  await provider.prepareImage!({
    format: 'derived',
    reference: derived,
    base,
    workdir: '/work',
    files: {},
    command: 'echo "agent:x:1000:1000::/home/agent:/bin/sh" >> /etc/passwd',
    env: {},
    labels: {},
  });
  // The image as `enroot create` unpacks it (a sandbox of it would go through its own start's hooks).
  const data = join(node.workDirectory, 'enroot', 'data');
  const image = join(node.workDirectory, 'images', `${imageFolderName(derived)}.sqsh`);
  try {
    expect(node.enroot('create', '--name', 'look', image).status).toBe(0);
    expect(await readFile(join(data, 'look', 'etc', 'passwd'), 'utf8')).toBe(
      `${passwd}agent:x:1000:1000::/home/agent:/bin/sh\n`,
    );
    expect(await readFile(join(data, 'look', 'etc', 'group'), 'utf8')).toBe('root:x:0:\n');
    await expect(stat(join(data, 'look', 'etc', 'apt', 'apt.conf.d', 'enroot'))).rejects.toThrow(/ENOENT/);
    await expect(stat(join(data, 'look', '.gym-before-hooks'))).rejects.toThrow(/ENOENT/);
    await expect(stat(join(data, 'look', 'root'))).rejects.toThrow(/ENOENT/);
  } finally {
    node.enroot('remove', '--force', 'look');
  }
});
