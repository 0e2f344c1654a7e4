/**
 * The daemon a command talks to: the one running for the state directory, or, when none runs,
 * one started in this process for the command alone (its own state directory and namespace, no
 * sandboxes kept). Either way the command asks the daemon's API, so it works whatever provider
 * the configuration names and never reaches a backend itself.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { GymClient } from '../client/client.ts';
import { isGymError } from '../core/errors.ts';
import type { Logger } from '../core/logger.ts';
import { loadConfig } from '../daemon/config.ts';
import { startDaemon } from '../daemon/daemon.ts';
import { connect } from './connect.ts';

export interface DaemonConnection {
  client: GymClient;
  /** True when no daemon ran and this process started one. */
  inProcess: boolean;
  /** Stops the in-process daemon (destroying anything it made); nothing for a running one. */
  close(): Promise<void>;
}

export async function connectOrStartInProcess(options: {
  stateDir: string;
  env: Readonly<Record<string, string | undefined>>;
}): Promise<DaemonConnection> {
  try {
    const client = await connect(options.stateDir);
    await client.health();
    return { client, inProcess: false, close: async () => {} };
  } catch (error) {
    if (!isGymError(error, 'DAEMON_UNAVAILABLE')) throw error;
  }
  // A state directory of its own, removed after: commands that run at once never contend for
  // one, and a daemon started later for the user's state directory finds nothing of this one.
  const stateDir = await mkdtemp(join(tmpdir(), 'gym-cli-daemon-'));
  const removeState = () => rm(stateDir, { recursive: true, force: true });
  const daemon = await startDaemon({
    // The configured providers (`GYM_CONFIG`), in a state directory and namespace of its own.
    config: await loadConfig({
      ...(options.env.GYM_CONFIG ? { configPath: options.env.GYM_CONFIG } : {}),
      env: options.env,
      overrides: [
        {
          stateDir,
          namespace: 'gym-cli',
          // Never the configured socket (a running daemon's), and no warm pools for one command.
          listen: { host: '127.0.0.1', port: 0, socket: undefined },
          pools: {},
          destroyOnShutdown: true,
          logLevel: 'warn',
        },
      ],
    }),
    // Warnings only: the command prints its own progress, the daemon's start and stop are noise.
    logger: pino({ level: options.env.GYM_LOG_LEVEL ?? 'warn' }, pino.destination(2)) as unknown as Logger &
      ReturnType<typeof pino>,
  }).catch(async (error: unknown) => {
    await removeState();
    throw error;
  });
  return {
    client: new GymClient({ url: daemon.address.url!, token: daemon.token }),
    inProcess: true,
    close: async () => {
      await daemon.stop({ destroy: true });
      await removeState();
    },
  };
}
