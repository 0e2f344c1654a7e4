/**
 * A compute node for the enroot provider's tests: a real sshd, a work directory with the busybox
 * image as a `.sqsh`, and the enroot stand-in (test/stand-ins/enroot.ts) as its `enroot`, or the
 * real enroot that GYM_TEST_ENROOT names (a check by hand: docs/providers/enroot.md).
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { chmod, mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { imageFolderName } from '../../providers/shared/image-folder.ts';
import { BUSYBOX_REFERENCE, makeBusyboxRoot } from '../fixtures/busybox-root.ts';
import { startSshd } from '../fixtures/sshd.ts';

const STAND_IN = new URL('../stand-ins/enroot.ts', import.meta.url).pathname;

/** Squashes a root filesystem folder into `<images>/<reference>.sqsh`, as the provider names them. */
export function squashInto(images: string, reference: string, root: string): void {
  execFileSync('mksquashfs', [
    root,
    join(images, `${imageFolderName(reference)}.sqsh`),
    '-all-root',
    '-noappend',
    '-no-progress',
    '-quiet',
    '-comp',
    'lzo',
    '-noD',
  ]);
}

/**
 * Puts enroot's three C helpers in `bin` as placeholders (the stand-in looks them up on PATH, as
 * enroot runs them by name, and runs none of them): beside the `enroot` there, as an install under
 * a prefix of its own leaves them, and not on the SSH session's PATH.
 */
export async function placeHelpers(bin: string): Promise<void> {
  for (const helper of ['enroot-nsenter', 'enroot-mount', 'enroot-switchroot']) {
    await writeFile(
      join(bin, helper),
      `#!/bin/sh\necho '${helper}: a placeholder of the enroot stand-in' >&2\nexit 1\n`,
    );
    await chmod(join(bin, helper), 0o755);
  }
}

/**
 * `user`: the SSH user is that user (not root) and owns the work directory; by default root, with
 * `allowRootSshUser`.
 */
export async function enrootNode(host: string, port: number, options: { user?: string } = {}) {
  const { user } = options;
  const sshd = await startSshd({ host, port, ...(user === undefined ? {} : { user }) });
  const workDirectory = await mkdtemp(join(tmpdir(), `gym-enroot-node-${host}-`));
  const handOver = () => {
    if (user !== undefined) execFileSync('chown', ['-R', `${user}:`, workDirectory]);
  };
  const images = join(workDirectory, 'images');
  const scratch = join(workDirectory, 'scratch');
  await makeBusyboxRoot(scratch);
  await mkdir(images);
  squashInto(images, BUSYBOX_REFERENCE, join(scratch, imageFolderName(BUSYBOX_REFERENCE)));
  await rm(scratch, { recursive: true, force: true });
  // GYM_TEST_ENROOT names a real enroot (its helpers beside it), for a check by hand; CI has none.
  const real = process.env.GYM_TEST_ENROOT;
  const bin = real === undefined ? join(workDirectory, 'bin') : dirname(real);
  const enroot = real ?? join(bin, 'enroot');
  if (real === undefined) {
    await mkdir(bin);
    await writeFile(enroot, `#!/bin/sh\nexec ${process.execPath} ${STAND_IN} "$@"\n`);
    await chmod(enroot, 0o755);
    await placeHelpers(bin);
  }
  handOver();
  const base = join(workDirectory, 'enroot');
  const env = {
    ...process.env,
    PATH: `${bin}:${process.env.PATH ?? ''}`,
    ENROOT_RUNTIME_PATH: join(base, 'runtime'),
    ENROOT_DATA_PATH: join(base, 'data'),
    ENROOT_CACHE_PATH: join(base, 'cache'),
    ENROOT_TEMP_PATH: join(base, 'tmp'),
  };
  return {
    sshd,
    workDirectory,
    /** Runs the stand-in here with the node's paths (what the provider sets over SSH). */
    enroot: (...args: string[]) => spawnSync(enroot, args, { env, encoding: 'utf8' }),
    /** Squashes the root filesystem folder `root` into image `reference` (then removes it), `aliases` linked to it. */
    async placeImage(root: string, reference: string, aliases: string[] = []) {
      squashInto(images, reference, root);
      await rm(root, { recursive: true, force: true });
      for (const name of aliases)
        await symlink(`${imageFolderName(reference)}.sqsh`, join(images, `${imageFolderName(name)}.sqsh`));
      handOver();
    },
    /** The containers on the node (`enroot list`). */
    listed: () =>
      spawnSync(enroot, ['list'], { env, encoding: 'utf8' })
        .stdout.split('\n')
        .filter((line) => line !== ''),
    host: {
      name: `node-${host.split('.').pop()}`,
      host,
      port,
      username: user ?? 'root',
      privateKeyPath: sshd.clientKeyPath,
      knownHostsPath: sshd.knownHostsPath,
      workDirectory,
      enroot,
      // Most tests log in as root: accepted here, refused by default.
      allowRootSshUser: user === undefined,
    },
    /**
     * Kills every container's processes still on the node (a failed test, or a host that was down
     * when its sandboxes were destroyed, leaves some) and removes them, then the node.
     */
    async cleanup() {
      const listed = spawnSync(enroot, ['list', '--fancy'], { env, encoding: 'utf8' });
      let name = '';
      for (const line of (listed.stdout ?? '').split('\n').slice(1)) {
        if (!line.startsWith(' ')) name = line.split(/\s+/)[0] ?? '';
        // Enroot lists the containers of other data paths (other tests' nodes) as <unknown>: not ours.
        if (name === '<unknown>') continue;
        const pid = line.trim().split(/\s+/)[line.startsWith(' ') ? 0 : 1];
        if (pid === undefined || !/^\d+$/.test(pid)) continue;
        spawnSync('sh', [
          '-c',
          `for c in $(cat /proc/${pid}/task/*/children 2>/dev/null); do kill -9 $c; done; kill -9 ${pid}`,
        ]);
      }
      await sshd.cleanup();
      await rm(workDirectory, { recursive: true, force: true });
    },
  };
}
