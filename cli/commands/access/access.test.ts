import { PassThrough } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import type { ProviderContext } from '../../../providers/sandbox-provider.ts';
import { startTestDaemon, type TestDaemon } from '../../../test/daemon-harness.ts';
import { MemoryProvider } from '../../../test/fixtures/memory-provider.ts';
import { runCli } from '../../program.ts';

let daemon: TestDaemon | undefined;
afterEach(async () => {
  await daemon?.cleanup();
  daemon = undefined;
});

async function gym(
  args: string[],
  env: Record<string, string> = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  stdout.on('data', (chunk: Buffer) => out.push(chunk));
  stderr.on('data', (chunk: Buffer) => err.push(chunk));
  // The state directory goes before any `--`, after which everything is the sandbox's command.
  const withState = [...args.slice(0, 2), '--state-dir', daemon!.stateDir, ...args.slice(2)];
  const code = await runCli(withState, { stdout, stderr, env });
  return { code, stdout: Buffer.concat(out).toString('utf8'), stderr: Buffer.concat(err).toString('utf8') };
}

describe('gym access grant|ls|revoke and --token', () => {
  it('lends a sandbox to a command that holds only the credential, then takes it back', async () => {
    daemon = await startTestDaemon(
      { providers: [{ name: 'memory' }] },
      {
        factories: { memory: (_options: unknown, context: ProviderContext) => new MemoryProvider(context) },
        listen: true,
      },
    );
    const lent = await daemon.manager.lifecycle.create({ image: 'img' });
    const kept = await daemon.manager.lifecycle.create({ image: 'img' });
    const granted = await gym(['access', 'grant', lent.id, '--rights', 'exec', '--ttl', '600']);
    expect(granted.code, granted.stderr).toBe(0);
    const token = granted.stdout.trim();
    expect(token).toMatch(/^gym-access\.acc-[a-z0-9]{16}\.[A-Za-z0-9_-]{43}$/);
    const grantId = token.split('.')[1]!;
    expect(granted.stderr).toContain(`grant ${grantId}: exec on ${lent.id}`);

    const listed = await gym(['access', 'ls']);
    expect(listed.stdout).toMatch(new RegExp(`^${grantId} +${lent.id} +exec `, 'm'));
    expect(listed.stdout).not.toContain(token.split('.')[2]);

    // With the credential (flag or GYM_TOKEN): its sandbox's commands, and nothing else.
    const ran = await gym(['sandbox', 'exec', lent.id, '--json', '--token', token, '--', 'echo', 'hi']);
    expect(ran.code, ran.stderr).toBe(0);
    const fromEnv = await gym(['sandbox', 'exec', lent.id, '--json', '--', 'true'], { GYM_TOKEN: token });
    expect(fromEnv.code, fromEnv.stderr).toBe(0);
    const other = await gym(['sandbox', 'exec', kept.id, '--', 'true'], { GYM_TOKEN: token });
    expect(other.code).not.toBe(0);
    expect(other.stderr).toContain('ACCESS_DENIED');
    const removed = await gym(['sandbox', 'rm', lent.id], { GYM_TOKEN: token });
    expect(removed.stderr).toContain('ACCESS_DENIED');
    expect(daemon.manager.lifecycle.get(lent.id).state).toBe('ready');
    const revoked = await gym(['access', 'revoke', grantId], { GYM_TOKEN: token });
    expect(revoked.code, revoked.stderr).toBe(0);
    const after = await gym(['sandbox', 'exec', lent.id, '--', 'true'], { GYM_TOKEN: token });
    expect(after.stderr).toContain('UNAUTHORIZED');
  });

  it('refuses a right that does not exist before asking the daemon', async () => {
    daemon = await startTestDaemon(
      { providers: [{ name: 'memory' }] },
      {
        factories: { memory: (_options: unknown, context: ProviderContext) => new MemoryProvider(context) },
        listen: true,
      },
    );
    const sandbox = await daemon.manager.lifecycle.create({ image: 'img' });
    const refused = await gym(['access', 'grant', sandbox.id, '--rights', 'exec,destroy']);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toContain('--rights');
    const grants = await daemon.app.inject({ method: 'GET', url: '/v1/access', headers: daemon.auth });
    expect(grants.json().grants).toEqual([]);
    expect(daemon.manager.lifecycle.list()).toHaveLength(1);
  });
});
