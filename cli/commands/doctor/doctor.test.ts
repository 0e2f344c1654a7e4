import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { runCli } from '../../program.ts';
import { effectiveCapabilities, findOnPath, relayPrivilege } from './host-checks.ts';

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

describe('gym doctor', () => {
  it('exits 1 when a required check fails (here: no nsenter on PATH), listing every check', async () => {
    const stateDir = await mkdtemp(join(tmpdir(), 'gym-doctor-'));
    const stdout = new PassThrough();
    const chunks: Buffer[] = [];
    stdout.on('data', (chunk: Buffer) => chunks.push(chunk));
    try {
      const code = await runCli(['doctor', '--json', '--state-dir', stateDir], {
        stdout,
        stderr: new PassThrough(),
        env: { PATH: '/nonexistent' },
      });
      const checks = JSON.parse(Buffer.concat(chunks).toString()) as Array<{
        name: string;
        ok: boolean;
        required?: boolean;
      }>;
      expect(code).toBe(1);
      expect(checks.find((check) => check.name === 'nsenter (gateway relay)')).toMatchObject({ ok: false });
      for (const name of ['exec helper', 'privileges (gateway relay)', 'provider docker', 'daemon'])
        expect(checks.map((check) => check.name)).toContain(name);
      // No daemon runs for this state directory: a warning, not a failure (one in-process stands in).
      expect(checks.find((check) => check.name === 'daemon')).toMatchObject({ ok: false, required: false });
    } finally {
      await rm(stateDir, { recursive: true, force: true });
    }
  });
});
