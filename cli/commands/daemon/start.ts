import { pino } from 'pino';
import type { Logger } from '../../../core/logger.ts';
import { configFromEnvironment, type DaemonConfigInput, loadConfig } from '../../../daemon/config.ts';
import { startDaemon } from '../../../daemon/daemon.ts';
import type { CommandOf } from '../../command.ts';
import type { daemonStart } from './definitions.ts';

/** `gym daemon start`: the daemon in the foreground until SIGTERM or SIGINT. */
export const daemonStartCommand: CommandOf<typeof daemonStart> = {
  async run({ options: values, env, stderr }) {
    const { configPath: envConfigPath, ...fromEnvironment } = configFromEnvironment(env);
    const listen: Record<string, unknown> = {};
    if (values.host !== undefined) listen.host = values.host;
    if (values.port !== undefined) listen.port = values.port;
    if (values.socket !== undefined) listen.socket = values.socket;
    const fromFlags: Partial<DaemonConfigInput> = {
      ...(values.stateDir === undefined ? {} : { stateDir: values.stateDir }),
      ...(values.namespace === undefined ? {} : { namespace: values.namespace }),
      ...(values.destroyOnShutdown === undefined ? {} : { destroyOnShutdown: values.destroyOnShutdown }),
      ...(Object.keys(listen).length === 0 ? {} : { listen: listen as DaemonConfigInput['listen'] }),
    };
    const configPath = values.config ?? envConfigPath;
    const config = await loadConfig({
      ...(configPath === undefined ? {} : { configPath }),
      overrides: [fromEnvironment, fromFlags],
      env,
    });
    const logger = pino(
      {
        level: config.logLevel,
        // Tokens and exec environments never reach the logs.
        redact: {
          paths: ['req.headers.authorization', 'headers.authorization', '*.env', 'env', 'token'],
          censor: '[redacted]',
        },
      },
      pino.destination(2),
    );
    const daemon = await startDaemon({ config, logger: logger as unknown as Logger & typeof logger });
    stderr.write(
      `gym daemon listening on ${daemon.address.url ?? daemon.address.socket} (state: ${config.stateDir})\n`,
    );
    await new Promise<void>((resolve) => {
      const onSignal = (signal: string) => {
        logger.info({ signal }, 'signal received');
        daemon.stop().then(resolve, (error: unknown) => {
          logger.error({ error: String(error) }, 'unclean stop');
          resolve();
        });
      };
      process.once('SIGTERM', onSignal);
      process.once('SIGINT', onSignal);
    });
    return 0;
  },
};
