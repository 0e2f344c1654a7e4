/** Builds a daemon for tests: a temporary state directory, a silent logger, chosen providers. */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import type { Logger } from '../core/logger.ts';
import { type DaemonConfigInput, loadConfig } from '../daemon/config.ts';
import { type RunningDaemon, startDaemon } from '../daemon/daemon.ts';
import { ProviderRegistry } from '../providers/registry.ts';
import type { SandboxProviderFactory } from '../providers/sandbox-provider.ts';

export interface TestDaemon extends RunningDaemon {
  stateDir: string;
  /** Headers with the bearer token, for inject(). */
  auth: { authorization: string };
  cleanup(): Promise<void>;
}

export async function startTestDaemon(
  config: Partial<DaemonConfigInput> = {},
  options: { factories?: Record<string, SandboxProviderFactory>; listen?: boolean } = {},
): Promise<TestDaemon> {
  const stateDir = config.stateDir ?? (await mkdtemp(join(tmpdir(), 'gym-daemon-test-')));
  const registry = new ProviderRegistry();
  for (const [name, factory] of Object.entries(options.factories ?? {})) registry.register(name, factory);
  const loaded = await loadConfig({
    env: {},
    overrides: [{ listen: { host: '127.0.0.1', port: 0 }, ...config, stateDir }],
  });
  const logger = pino({ level: 'silent' }) as unknown as Logger & ReturnType<typeof pino>;
  const daemon = await startDaemon({ config: loaded, logger, registry, listen: options.listen ?? false });
  return {
    ...daemon,
    stateDir,
    auth: { authorization: `Bearer ${daemon.token}` },
    cleanup: async () => {
      await daemon.stop();
      if (config.stateDir === undefined) await rm(stateDir, { recursive: true, force: true });
    },
  };
}
