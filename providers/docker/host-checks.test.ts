import { dirname } from 'node:path';
import { describe, expect, it } from 'vitest';
import { hostChecksOf } from '../host-checks.ts';
import { effectiveCapabilities, findOnPath } from '../shared/host-tools.ts';
import { relayPrivilege } from './host-checks.ts';

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

describe('host checks per provider', () => {
  const env = { PATH: dirname(process.execPath) };

  it("checks Docker's exec helper where its options put it, and the relay's tools only with gateway reach", async () => {
    const docker = hostChecksOf({ name: 'docker' })!;
    const withoutReach = await docker.run({
      options: { execHelperPath: '/nonexistent/gym-exec', gatewayReach: false },
      env,
    });
    expect(withoutReach).toEqual([
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
    expect(withReach.map((check) => [check.name, check.ok])).toEqual([
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
