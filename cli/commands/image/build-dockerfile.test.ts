import { mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { GymClient } from '../../../client/client.ts';
import { silentLogger } from '../../../core/logger.ts';
import { EXIT_USAGE, runCli } from '../../program.ts';
import { buildDockerfileContext } from './build-dockerfile.ts';

/** Runs `gym ARGS...` in this process; none of these calls gets as far as a daemon. */
async function gym(args: string[]): Promise<{ code: number; stderr: string }> {
  const stderr = new PassThrough();
  const chunks: Buffer[] = [];
  stderr.on('data', (chunk: Buffer) => chunks.push(chunk));
  const code = await runCli(args, { stdout: new PassThrough(), stderr, env: {} });
  return { code, stderr: Buffer.concat(chunks).toString() };
}

/** A client no check below may reach: each refusal comes before the daemon is asked anything. */
const unreachable = new Proxy({} as GymClient, {
  get: (_target, name) => () => {
    throw new Error(`the daemon was asked (${String(name)})`);
  },
});

describe('gym image build --context', () => {
  let directory = '';
  beforeAll(async () => {
    directory = await mkdtemp(join(tmpdir(), 'gym-build-context-'));
  });
  afterAll(async () => {
    await rm(directory, { recursive: true, force: true });
  });

  it.each([
    [['image', 'build', 'busybox', '--context', '/tmp/x'], '--context builds one Dockerfile'],
    [['image', 'build', '--name', 'task'], '--name and --timeout-seconds go with --context'],
    [['image', 'build', '--context', '/tmp/x', '--timeout-seconds', '0'], 'It must be at least 1.'],
  ])('refuses gym %j', async (args, message) => {
    const result = await gym(args);
    expect(result.code).toBe(EXIT_USAGE);
    expect(result.stderr).toContain(message);
  });

  it('refuses a context without a Dockerfile, and one whose link would bring a host file in', async () => {
    const empty = join(directory, 'empty', 'environment');
    await mkdir(empty, { recursive: true });
    await expect(buildDockerfileContext(unreachable, { context: empty }, silentLogger)).rejects.toThrow(
      'has no Dockerfile',
    );
    const linked = join(directory, 'linked', 'environment');
    await mkdir(linked, { recursive: true });
    await writeFile(join(linked, 'Dockerfile'), 'FROM gym/busybox:latest\nCOPY key /root/key\n');
    await symlink('/etc/hostname', join(linked, 'key'));
    await expect(buildDockerfileContext(unreachable, { context: linked }, silentLogger)).rejects.toThrow(
      'symbolic link out of',
    );
  });
});
