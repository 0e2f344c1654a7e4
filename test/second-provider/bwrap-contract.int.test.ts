/**
 * The provider contract against the second provider (bubblewrap on this host, no Docker): what
 * it declares it has must behave exactly as on Docker; what it lacks (sessions, snapshot,
 * gateway reach) must be refused or fall back as the contract says.
 */
import { chmod, copyFile, mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll } from 'vitest';
import { describeSandboxProviderContract } from '../../providers/contract/index.ts';
import { BwrapProvider, imageFolderName } from '../fixtures/bwrap-provider.ts';
import { testContext } from '../fixtures/provider-context.ts';

export const BUSYBOX_REFERENCE = 'local/busybox:rootfs';

/** A busybox root filesystem from the host's static busybox: every applet a link to it. */
export async function makeBusyboxRoot(imageDirectory: string): Promise<void> {
  const root = join(imageDirectory, imageFolderName(BUSYBOX_REFERENCE));
  for (const directory of ['bin', 'etc', 'tmp', 'root', 'dev', 'proc'])
    await mkdir(join(root, directory), { recursive: true });
  await chmod(join(root, 'tmp'), 0o1777);
  await copyFile('/bin/busybox', join(root, 'bin/busybox'));
  const { execFileSync } = await import('node:child_process');
  const applets = execFileSync('/bin/busybox', ['--list']).toString().split('\n').filter(Boolean);
  for (const applet of applets)
    if (applet !== 'busybox') await symlink('busybox', join(root, 'bin', applet)).catch(() => {});
  await writeFile(
    join(root, 'etc/passwd'),
    'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n',
  );
  await writeFile(join(root, 'etc/group'), 'root:x:0:\nnogroup:x:65534:\n');
}

const imageDirectory = await mkdtemp(join(tmpdir(), 'gym-bwrap-images-'));
const stateDirectory = await mkdtemp(join(tmpdir(), 'gym-bwrap-state-'));
await makeBusyboxRoot(imageDirectory);
afterAll(async () => {
  await rm(imageDirectory, { recursive: true, force: true });
  await rm(stateDirectory, { recursive: true, force: true });
});

describeSandboxProviderContract({
  name: 'bwrap (second provider, no Docker)',
  image: BUSYBOX_REFERENCE,
  capabilities: { sessions: false, snapshot: false, gatewayReach: false, timeoutKill: 'cgroup' },
  createProvider: () => new BwrapProvider({ imageDirectory }, { ...testContext(), stateDirectory }),
});
