/**
 * A compute node for the HPC providers' tests: a real sshd, a work directory with the busybox image,
 * the apptainer stand-in (or the real apptainer that GYM_TEST_APPTAINER names, for a check by hand).
 */
import { spawnSync } from 'node:child_process';
import { chmod, mkdir, mkdtemp, rename, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { imageFolderName } from '../../providers/shared/image-folder.ts';
import { makeBusyboxRoot } from '../fixtures/busybox-root.ts';
import { startSshd } from '../fixtures/sshd.ts';

const STAND_IN = new URL('../stand-ins/apptainer.ts', import.meta.url).pathname;

/** A compute node: an sshd, a work directory with the busybox image, the stand-in on its PATH. */
export async function computeNode(host: string, port: number) {
  const sshd = await startSshd({ host, port });
  const workDirectory = await mkdtemp(join(tmpdir(), `gym-node-${host}-`));
  await makeBusyboxRoot(join(workDirectory, 'images'));
  // GYM_TEST_APPTAINER names a real apptainer, for a check by hand; CI has none.
  const real = process.env.GYM_TEST_APPTAINER;
  const apptainer = real ?? join(workDirectory, 'bin', 'apptainer');
  if (real === undefined) {
    await mkdir(join(workDirectory, 'bin'));
    await writeFile(apptainer, `#!/bin/sh\nexec ${process.execPath} ${STAND_IN} "$@"\n`);
    await chmod(apptainer, 0o755);
  }
  const env = { ...process.env, APPTAINER_CONFIGDIR: join(workDirectory, 'apptainer') };
  const instances = () => {
    const listed = spawnSync(apptainer, ['instance', 'list', '--json'], { env, encoding: 'utf8' });
    if (listed.status !== 0) return [];
    return (JSON.parse(listed.stdout) as { instances: Array<{ instance: string }> }).instances.map(
      ({ instance }) => instance,
    );
  };
  return {
    sshd,
    workDirectory,
    host: {
      name: `node-${host.split('.').pop()}`,
      host,
      port,
      username: 'root',
      privateKeyPath: sshd.clientKeyPath,
      knownHostsPath: sshd.knownHostsPath,
      workDirectory,
      apptainer,
      env: { APPTAINER_CONFIGDIR: join(workDirectory, 'apptainer') },
      // The tests log in as root (the stand-ins need it): accepted here, refused by default.
      allowRootSshUser: true,
    },
    /** Moves the root filesystem folder `root` in as the sandbox directory of image `reference`, `aliases` linked to it. */
    async placeImage(root: string, reference: string, aliases: string[] = []) {
      const images = join(workDirectory, 'images');
      await rename(root, join(images, imageFolderName(reference)));
      for (const name of aliases)
        await symlink(imageFolderName(reference), join(images, imageFolderName(name)));
    },
    /** The instances on the node (what `instance list` names). */
    listed: instances,
    /**
     * Stops every instance still on the node (a test that failed, or a host that was down when its
     * sandboxes were destroyed, leaves some: their keepers and overlay mounts would outlive the
     * test), then removes the node.
     */
    async cleanup() {
      for (const instance of instances())
        spawnSync(apptainer, ['instance', 'stop', '--force', instance], { env, stdio: 'ignore' });
      await sshd.cleanup();
      await rm(workDirectory, { recursive: true, force: true });
    },
  };
}
