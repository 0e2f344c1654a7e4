/** Builds a daemon for tests: a temporary state directory, a silent logger, chosen providers. */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { GymClient } from '../client/client.ts';
import type { Clock } from '../core/clock.ts';
import type { Logger } from '../core/logger.ts';
import { type DaemonConfigInput, loadConfig } from '../daemon/config.ts';
import { type RunningDaemon, startDaemon } from '../daemon/daemon.ts';
import type { Resolver } from '../daemon/egress/proxy.ts';
import type { DaemonInfo } from '../daemon/identity.ts';
import { ProviderRegistry } from '../providers/registry.ts';
import type { SandboxProviderFactory } from '../providers/sandbox-provider.ts';
import { waitFor } from './wait-for.ts';

const CLI_ENTRY = new URL('../cli/main.ts', import.meta.url).pathname;

export interface TestDaemon extends RunningDaemon {
  stateDir: string;
  /** Headers with the bearer token, for inject(). */
  auth: { authorization: string };
  cleanup(): Promise<void>;
}

export async function startTestDaemon(
  config: Partial<DaemonConfigInput> = {},
  options: {
    factories?: Record<string, SandboxProviderFactory>;
    listen?: boolean;
    egressResolver?: Resolver;
    /** The daemon's clock (the system's when absent): a test moves it to expire leases or snapshots. */
    clock?: Clock;
  } = {},
): Promise<TestDaemon> {
  const stateDir = config.stateDir ?? (await mkdtemp(join(tmpdir(), 'gym-daemon-test-')));
  const registry = new ProviderRegistry();
  for (const [name, factory] of Object.entries(options.factories ?? {})) registry.register(name, factory);
  const loaded = await loadConfig({
    env: {},
    overrides: [{ listen: { host: '127.0.0.1', port: 0 }, ...config, stateDir }],
  });
  const logger = pino({ level: process.env.GYM_TEST_LOG_LEVEL ?? 'silent' }) as unknown as Logger &
    ReturnType<typeof pino>;
  const daemon = await startDaemon({
    config: loaded,
    logger,
    registry,
    listen: options.listen ?? false,
    ...(options.egressResolver === undefined ? {} : { egressResolver: options.egressResolver }),
    ...(options.clock === undefined ? {} : { clock: options.clock }),
  });
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

/**
 * Starts `gym daemon start --config FILE` as a child process (so a test can kill -9 it) and
 * waits for its daemon.json; returns the process and a client of it.
 */
export async function spawnDaemonProcess(
  configPath: string,
  stateDir: string,
): Promise<{ child: ChildProcess; client: GymClient }> {
  await rm(join(stateDir, 'daemon.json'), { force: true });
  const child = spawn(process.execPath, [CLI_ENTRY, 'daemon', 'start', '--config', configPath], {
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const info = await waitFor(
    'daemon.json',
    async () => {
      const text = await readFile(join(stateDir, 'daemon.json'), 'utf8').catch(() => undefined);
      if (text === undefined) return undefined;
      try {
        return JSON.parse(text) as DaemonInfo;
      } catch {
        return undefined;
      }
    },
    20_000,
  );
  const token = (await readFile(join(stateDir, 'token'), 'utf8')).trim();
  return { child, client: new GymClient({ url: info.url!, token }) };
}
