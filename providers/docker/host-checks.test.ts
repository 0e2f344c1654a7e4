import { dirname } from 'node:path';
import { describe, expect, it } from 'vitest';
import { hostChecksOf } from '../host-checks.ts';
import { effectiveCapabilities, findOnPath } from '../shared/host-tools.ts';
import { cgroup2Mount, favordynmodsCheck, relayPrivilege } from './host-checks.ts';

/** /proc/self/status lines as Linux prints them (root in the initial namespace, then a plain user). */
const ROOT_STATUS = 'Name:\tnode\nUid:\t0\t0\t0\t0\nCapEff:\t000001ffffffffff\nCapBnd:\t000001ffffffffff\n';
const USER_STATUS = 'Name:\tnode\nUid:\t1000\t1000\t1000\t1000\nCapEff:\t0000000000000000\n';
/** Docker's default capability set for a container: no CAP_SYS_ADMIN, no CAP_SYS_PTRACE. */
const CONTAINER_ROOT_STATUS = 'CapEff:\t00000000a80425fb\n';

describe('gateway relay privileges', () => {
  it('reads the effective set and names what is missing', () => {
    expect(effectiveCapabilities(ROOT_STATUS)).toBe(0x1ffffffffffn);
    expect(relayPrivilege(0, ROOT_STATUS)).toEqual({
      ok: true,
      detail: 'root with CAP_SYS_ADMIN and CAP_SYS_PTRACE',
    });
    expect(relayPrivilege(1000, USER_STATUS)).toEqual({
      ok: false,
      detail: 'uid 1000 lacks CAP_SYS_ADMIN and CAP_SYS_PTRACE',
    });
    // Root in a default Docker container is not enough.
    expect(relayPrivilege(0, CONTAINER_ROOT_STATUS)).toEqual({
      ok: false,
      detail: 'root lacks CAP_SYS_ADMIN and CAP_SYS_PTRACE',
    });
    expect(relayPrivilege(1000, undefined).ok).toBe(false);
  });

  it('finds a tool on PATH only as an executable file', () => {
    const node = process.execPath;
    expect(findOnPath('node', `/nonexistent:${dirname(node)}`)).toBe(node);
    expect(findOnPath('node', '/nonexistent')).toBeUndefined();
    expect(findOnPath('node', undefined)).toBeUndefined();
    // A directory of that name is not the tool.
    expect(findOnPath(dirname(node).split('/').pop()!, dirname(dirname(node)))).toBeUndefined();
  });
});

describe('cgroup2 favordynmods', () => {
  // /proc/self/mountinfo lines as Linux prints them: a v2 host, a hybrid one, a v1 one.
  const v2 =
    '30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n';
  const hybrid =
    '32 25 0:27 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755\n' +
    '41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,favordynmods\n' +
    '42 31 0:39 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n';
  const v1 = '42 31 0:39 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory\n';

  it('finds the cgroup2 mount wherever it is and reads favordynmods from its superblock options', () => {
    expect(cgroup2Mount(v2)).toEqual({ path: '/sys/fs/cgroup', favordynmods: false });
    expect(cgroup2Mount(hybrid)).toEqual({ path: '/sys/fs/cgroup/unified', favordynmods: true });
    expect(cgroup2Mount(v1)).toBeNull();
  });

  it('warns without it, naming the cost and the remount, and says nothing without cgroup2', () => {
    const missing = favordynmodsCheck(v2)!;
    expect(missing).toMatchObject({ ok: false, required: false });
    expect(missing.detail).toContain('~12 ms per exec');
    expect(missing.fix).toContain('mount -o remount,favordynmods /sys/fs/cgroup');
    expect(favordynmodsCheck(hybrid)).toMatchObject({
      ok: true,
      detail: expect.stringContaining('/sys/fs/cgroup/unified'),
    });
    expect(favordynmodsCheck(v1)).toBeNull();
    expect(favordynmodsCheck(undefined)).toBeNull();
  });
});

describe('host checks per provider', () => {
  const env = { PATH: dirname(process.execPath) };

  it("checks Docker's exec helper where its options put it, and the relay's tools only with gateway reach", async () => {
    const docker = hostChecksOf({ name: 'docker' })!;
    // Whether the host's cgroup2 mount has favordynmods is a warning of its own (below).
    const withoutFavordynmods = <Check extends { name: string }>(checks: Check[]) =>
      checks.filter((check) => !check.name.startsWith('cgroup2 favordynmods'));
    const withoutReach = await docker.run({
      options: { execHelperPath: '/nonexistent/gym-exec', gatewayReach: false },
      env,
    });
    expect(withoutFavordynmods(withoutReach)).toEqual([
      expect.objectContaining({
        name: 'exec helper',
        ok: false,
        detail: expect.stringContaining('/nonexistent/gym-exec'),
      }),
    ]);
    const withReach = await docker.run({
      options: { execHelperPath: process.execPath },
      env: { PATH: '/nonexistent' },
    });
    expect(withoutFavordynmods(withReach).map((check) => [check.name, check.ok])).toEqual([
      ['exec helper', true],
      ['nsenter (gateway relay)', false],
      ['privileges (gateway relay)', expect.any(Boolean)],
    ]);
  });

  it.each(['kubernetes', 'apptainer', 'enroot'])(
    'checks the static relay of %s where its options put it, and nothing without gateway reach',
    async (name) => {
      const checks = hostChecksOf({ name })!;
      expect(await checks.run({ options: { relayHelperPath: '/nonexistent/gym-relay' }, env })).toEqual([
        expect.objectContaining({ name: `relay helper (provider ${name})`, ok: false }),
      ]);
      expect((await checks.run({ options: { relayHelperPath: process.execPath }, env }))[0]?.ok).toBe(true);
      expect(await checks.run({ options: { gatewayReach: false }, env })).toEqual([]);
    },
  );

  it('has none for a third-party module, even one named like a built-in, or an unknown name', () => {
    expect(hostChecksOf({ name: 'docker', module: './my-provider.ts' })).toBeUndefined();
    expect(hostChecksOf({ name: 'memory' })).toBeUndefined();
  });
});
