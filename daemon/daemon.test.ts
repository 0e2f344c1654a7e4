import { chown, mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { ProviderContext } from '../providers/sandbox-provider.ts';
import { startTestDaemon } from '../test/daemon-harness.ts';
import { MemoryProvider } from '../test/fixtures/memory-provider.ts';

const factories = { memory: (_options: unknown, context: ProviderContext) => new MemoryProvider(context) };
const providers = [{ name: 'memory' }];

describe('daemon start-up', () => {
  it('gives each provider a state directory of its own, 0700, that it finds again after a restart', async () => {
    const stateDir = await mkdtemp(join(tmpdir(), 'gym-provider-state-'));
    const seen: string[] = [];
    const keeping = {
      memory: async (_options: unknown, context: ProviderContext) => {
        seen.push(context.stateDirectory);
        const marker = join(context.stateDirectory, 'inventory.json');
        const previous = await readFile(marker, 'utf8').catch(() => null);
        await writeFile(marker, String(Number(previous ?? 0) + 1), { mode: 0o600 });
        return new MemoryProvider(context);
      },
    };
    const first = await startTestDaemon({ stateDir, providers }, { factories: keeping });
    await first.stop();
    const second = await startTestDaemon({ stateDir, providers }, { factories: keeping });
    await second.stop();
    expect(seen).toEqual([join(stateDir, 'providers', 'memory'), join(stateDir, 'providers', 'memory')]);
    expect(await readFile(join(stateDir, 'providers', 'memory', 'inventory.json'), 'utf8')).toBe('2');
    for (const directory of [join(stateDir, 'providers'), join(stateDir, 'providers', 'memory')]) {
      expect((await stat(directory)).mode & 0o777).toBe(0o700);
    }
    await rm(stateDir, { recursive: true, force: true });
  });

  it('refuses a provider name that is not one path segment', async () => {
    const stateDir = await mkdtemp(join(tmpdir(), 'gym-provider-name-'));
    const error = await startTestDaemon(
      { stateDir, providers: [{ name: '../escape' }] },
      { factories },
    ).catch((caught: unknown) => caught);
    expect(error).toMatchObject({ code: 'VALIDATION_FAILED' });
    expect((error as Error).message).toContain('providers.0.name');
    await rm(stateDir, { recursive: true, force: true });
  });

  it('refuses a second daemon on the same state directory, and frees it on stop', async () => {
    const stateDir = await mkdtemp(join(tmpdir(), 'gym-lock-'));
    const first = await startTestDaemon({ stateDir, providers }, { factories });
    const second = await startTestDaemon({ stateDir, providers }, { factories }).catch(
      (error: unknown) => error,
    );
    expect(second).toMatchObject({ code: 'DAEMON_CONFLICT' });
    expect((second as Error).message).toContain(`pid ${process.pid}`);
    await first.stop();
    const third = await startTestDaemon({ stateDir, providers }, { factories });
    await third.stop();
    await rm(stateDir, { recursive: true, force: true });
  });

  it.skipIf(process.getuid?.() !== 0)(
    'refuses to start on an owner registry another user could write, naming owners.directory',
    async () => {
      const stateDir = await mkdtemp(join(tmpdir(), 'gym-owners-dir-'));
      const directory = join(stateDir, 'daemons');
      await mkdir(directory, { mode: 0o700 });
      await chown(directory, 65534, 65534);
      const error = await startTestDaemon(
        { stateDir, providers, owners: { directory } },
        { factories },
      ).catch((caught: unknown) => caught);
      expect(error).toMatchObject({ code: 'VALIDATION_FAILED', details: { setting: 'owners.directory' } });
      expect((error as Error).message).toContain(`${directory} belongs to uid 65534`);
      // Nothing was written there, and the state directory is free for a start that fixes it.
      expect(await readdir(directory)).toEqual([]);
      const retried = await startTestDaemon(
        { stateDir, providers, owners: { directory: join(stateDir, 'mine') } },
        { factories },
      );
      await retried.stop();
      await rm(stateDir, { recursive: true, force: true });
    },
  );

  it('says clearly when its port is taken, and leaves the state directory free', async () => {
    const blocker = createServer();
    await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
    const port = (blocker.address() as { port: number }).port;
    const stateDir = await mkdtemp(join(tmpdir(), 'gym-port-'));
    const error = await startTestDaemon(
      { stateDir, providers, listen: { host: '127.0.0.1', port } },
      { factories, listen: true },
    ).catch((caught: unknown) => caught);
    expect(error).toMatchObject({ code: 'DAEMON_CONFLICT' });
    expect((error as Error).message).toContain(`cannot listen on 127.0.0.1:${port}`);
    blocker.close();
    const retried = await startTestDaemon({ stateDir, providers }, { factories });
    await retried.stop();
    await rm(stateDir, { recursive: true, force: true });
  });
});
