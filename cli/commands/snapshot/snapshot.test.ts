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

/** The memory provider with a native snapshot that copies nothing (the CLI only shows records). */
function snapshotting(context: ProviderContext): MemoryProvider {
  const provider = new MemoryProvider(context, { capabilities: { snapshot: true } });
  return Object.assign(provider, {
    snapshot: async (_id: string, options: { image: string }) => ({
      image: options.image,
      sizeBytes: 3 * 1024 * 1024,
    }),
    deleteSnapshot: async () => {},
  });
}

async function gym(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  stdout.on('data', (chunk: Buffer) => out.push(chunk));
  stderr.on('data', (chunk: Buffer) => err.push(chunk));
  const code = await runCli([...args, '--state-dir', daemon!.stateDir], { stdout, stderr, env: {} });
  return { code, stdout: Buffer.concat(out).toString('utf8'), stderr: Buffer.concat(err).toString('utf8') };
}

describe('gym sandbox fork and gym snapshot ls|rm', () => {
  it('forks into children, lists the snapshot, and removes it', async () => {
    daemon = await startTestDaemon(
      { providers: [{ name: 'memory' }] },
      {
        factories: { memory: (_options: unknown, context: ProviderContext) => snapshotting(context) },
        listen: true,
      },
    );
    const parent = await daemon.manager.lifecycle.create({ image: 'img' });
    const forked = await gym(['sandbox', 'fork', parent.id, '--count', '2', '--label', 'branch=b']);
    expect(forked.code, forked.stderr).toBe(0);
    const children = forked.stdout.trim().split('\n');
    expect(children).toHaveLength(2);
    for (const [forkIndex, id] of children.entries())
      expect(daemon.manager.lifecycle.get(id)).toMatchObject({
        lineage: { parent: parent.id, forkIndex },
        labels: { branch: 'b' },
      });

    const listed = await gym(['snapshot', 'ls']);
    const [snapshot] = daemon.manager.snapshots.list();
    expect(listed.stdout).toMatch(/^ID +PROVIDER +METHOD/);
    expect(listed.stdout).toContain(`${snapshot!.id}  memory    native  ${parent.id}`);
    expect(listed.stdout).toContain('3 MiB');
    expect(JSON.parse((await gym(['snapshot', 'ls', '--json'])).stdout)).toEqual([snapshot]);

    const removed = await gym(['snapshot', 'rm', snapshot!.id]);
    expect(removed).toMatchObject({ code: 0, stdout: `${snapshot!.id}\n` });
    expect(daemon.manager.snapshots.list()).toEqual([]);

    const live = await gym(['sandbox', 'fork', parent.id, '--live']);
    expect(live.code).toBe(1);
    expect(live.stderr).toContain('liveFork');
  });
});
