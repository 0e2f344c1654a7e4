/**
 * The provider contract against the second provider (bubblewrap on this host, no Docker): what
 * it declares it has must behave exactly as on Docker; what it lacks (sessions, snapshot,
 * gateway reach) must be refused or fall back as the contract says.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll } from 'vitest';
import { describeSandboxProviderContract } from '../../providers/contract/index.ts';
import { imageFolderName } from '../../providers/shared/image-folder.ts';
import { BUSYBOX_REFERENCE, makeBusyboxRoot } from '../fixtures/busybox-root.ts';
import { BwrapProvider } from '../fixtures/bwrap-provider.ts';
import { testContext } from '../fixtures/provider-context.ts';

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
  capabilities: {
    sessions: false,
    snapshot: false,
    gatewayReach: false,
    timeoutKill: 'cgroup',
    imageFormats: ['rootfs', 'plan'],
  },
  createProvider: () => new BwrapProvider({ imageDirectory }, { ...testContext(), stateDirectory }),
  // An image prepared here is a folder (or an alias's link to one) and its config beside it.
  removeImage: async (image) => {
    const path = join(imageDirectory, imageFolderName(image));
    await rm(path, { recursive: true, force: true });
    await rm(`${path}.image.json`, { force: true });
  },
});
