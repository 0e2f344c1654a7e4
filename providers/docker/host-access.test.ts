import { mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GymError } from '../../core/errors.ts';
import { HostAccessPolicy, type HostAccessSettings } from './host-access.ts';

const NONE: HostAccessSettings = {
  allowedHostPaths: [],
  allowedCapabilities: [],
  allowedNetworkModes: ['none'],
  snapshotImagePrefixes: ['gym-snapshot/'],
};

async function refusal(promise: Promise<unknown> | (() => unknown)): Promise<GymError> {
  try {
    await (typeof promise === 'function' ? promise() : promise);
  } catch (error) {
    if (error instanceof GymError) return error;
    throw error;
  }
  throw new Error('expected a refusal');
}

describe('HostAccessPolicy', () => {
  let root: string;
  let allowed: string;
  let engineDir: string;
  let engineSocket: string;

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'gym-host-access-'));
    allowed = join(root, 'cache');
    engineDir = join(root, 'engine');
    engineSocket = join(engineDir, 'engine.sock');
    await mkdir(join(allowed, 'bin'), { recursive: true });
    await mkdir(join(root, 'cache-other'), { recursive: true });
    await mkdir(engineDir, { recursive: true });
    await writeFile(engineSocket, '');
    await symlink(engineDir, join(allowed, 'to-engine'));
  });
  afterAll(() => rm(root, { recursive: true, force: true }));

  it('compares paths by component, after resolving . and ..', async () => {
    const policy = new HostAccessPolicy({ ...NONE, allowedHostPaths: [allowed] }, engineSocket);
    expect(await policy.resolveBinds([{ hostPath: `${allowed}/./bin/`, path: '/b' }])).toEqual([
      { hostPath: join(allowed, 'bin'), path: '/b' },
    ]);
    for (const hostPath of [join(root, 'cache-other'), `${allowed}/../engine`]) {
      const error = await refusal(policy.resolveBinds([{ hostPath, path: '/b' }]));
      expect(error.code).toBe('FORBIDDEN_BY_CONFIG');
      expect(error.details.setting).toBe('allowedHostPaths');
    }
  });

  it('refuses the engine socket, or a directory holding it, unless listed exactly', async () => {
    const broad = new HostAccessPolicy({ ...NONE, allowedHostPaths: [root] }, engineSocket);
    for (const hostPath of [engineSocket, engineDir, join(allowed, 'to-engine')]) {
      const error = await refusal(broad.resolveBinds([{ hostPath, path: '/e' }]));
      expect(error.message).toContain('engine socket');
    }
    const exact = new HostAccessPolicy({ ...NONE, allowedHostPaths: [engineSocket] }, engineSocket);
    expect(await exact.resolveBinds([{ hostPath: engineSocket, path: '/e' }])).toHaveLength(1);
  });

  it('checks capabilities and network modes against the lists, defaults excepted', async () => {
    const policy = new HostAccessPolicy({ ...NONE, allowedCapabilities: ['NET_RAW'] }, undefined);
    policy.checkCapabilities(['CHOWN', 'NET_RAW'], ['CHOWN']);
    const capability = await refusal(() => policy.checkCapabilities(['SYS_ADMIN'], ['CHOWN']));
    expect(capability.details).toMatchObject({ setting: 'allowedCapabilities', capabilities: ['SYS_ADMIN'] });
    const network = await refusal(() => policy.checkNetwork('bridge'));
    expect(network.details.setting).toBe('allowedNetworkModes');
  });

  it('writes snapshots only under a prefix, and never over an image that is not a snapshot', async () => {
    const policy = new HostAccessPolicy({ ...NONE, snapshotImagePrefixes: ['gym-snapshot/'] }, undefined);
    policy.checkSnapshotTarget('gym-snapshot/a:1', null);
    policy.checkSnapshotTarget('gym-snapshot/a:1', { isSnapshot: true });
    expect(
      (await refusal(() => policy.checkSnapshotTarget('gym-snapshot/a:1', { isSnapshot: false }))).code,
    ).toBe('FORBIDDEN_BY_CONFIG');
    expect(
      (await refusal(() => policy.checkSnapshotTarget('gym/busybox:latest', null))).details.setting,
    ).toBe('snapshotImagePrefixes');
  });
});
