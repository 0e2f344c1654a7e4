import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { runCli } from '../../program.ts';

interface DoctorCheck {
  name: string;
  ok: boolean;
  required?: boolean;
  fix?: string;
}

/** `gym doctor --json` in a fresh state directory with this environment: its exit code and checks. */
async function runDoctor(env: Record<string, string>): Promise<{ code: number; checks: DoctorCheck[] }> {
  const stateDir = await mkdtemp(join(tmpdir(), 'gym-doctor-'));
  const stdout = new PassThrough();
  const chunks: Buffer[] = [];
  stdout.on('data', (chunk: Buffer) => chunks.push(chunk));
  try {
    const code = await runCli(['doctor', '--json', '--state-dir', stateDir], {
      stdout,
      stderr: new PassThrough(),
      env,
    });
    return { code, checks: JSON.parse(Buffer.concat(chunks).toString()) as DoctorCheck[] };
  } finally {
    await rm(stateDir, { recursive: true, force: true });
  }
}

const DOCKER_HOST_CHECKS = ['exec helper', 'nsenter (gateway relay)', 'privileges (gateway relay)'];

describe('gym doctor', () => {
  it("checks only the configured providers' host needs: none of Docker's without a Docker provider", async () => {
    const directory = await mkdtemp(join(tmpdir(), 'gym-doctor-config-'));
    try {
      const config = join(directory, 'gym.yaml');
      const memoryModule = new URL('../../../test/fixtures/memory-provider.ts', import.meta.url).pathname;
      await writeFile(config, `providers:\n  - name: memory\n    module: ${memoryModule}\n`);
      // No nsenter on this PATH: a failure with a Docker provider (the test below), nothing here.
      const { code, checks } = await runDoctor({ PATH: '/nonexistent', GYM_CONFIG: config });
      const names = checks.map((check) => check.name);
      for (const name of DOCKER_HOST_CHECKS) expect(names).not.toContain(name);
      expect(names).not.toContain('provider docker');
      expect(checks.find((check) => check.name === 'provider memory')).toMatchObject({ ok: true });
      expect(checks.filter((check) => !check.ok && check.required !== false)).toEqual([]);
      expect(code).toBe(0);
    } finally {
      await rm(directory, { recursive: true, force: true });
    }
  });

  it('reports a GYM_CONFIG that does not load as a failed check (the state directory may come from it)', async () => {
    const stdout = new PassThrough();
    const chunks: Buffer[] = [];
    stdout.on('data', (chunk: Buffer) => chunks.push(chunk));
    const env = { PATH: '/nonexistent', GYM_CONFIG: '/nonexistent/gym.yaml' };
    const code = await runCli(['doctor', '--json'], { stdout, stderr: new PassThrough(), env });
    const checks = JSON.parse(Buffer.concat(chunks).toString()) as DoctorCheck[];
    expect(code).toBe(1);
    expect(checks.find((check) => check.name === 'providers')).toMatchObject({
      ok: false,
      detail: expect.stringContaining('cannot read config file /nonexistent/gym.yaml'),
    });
  });

  it('exits 1 when a required check fails (here: no nsenter on PATH), listing every check', async () => {
    // No GYM_CONFIG: the default configuration, one Docker provider, so Docker's host checks.
    const { code, checks } = await runDoctor({ PATH: '/nonexistent' });
    expect(code).toBe(1);
    expect(checks.find((check) => check.name === 'nsenter (gateway relay)')).toMatchObject({ ok: false });
    for (const name of [...DOCKER_HOST_CHECKS, 'provider docker', 'daemon'])
      expect(checks.map((check) => check.name)).toContain(name);
    expect(checks.find((check) => check.name === 'provider docker')?.fix).toContain('dockerd');
    // No daemon runs for this state directory: a warning, not a failure (one in-process stands in).
    expect(checks.find((check) => check.name === 'daemon')).toMatchObject({ ok: false, required: false });
  });
});
