import { parseArgs } from 'node:util';
import { pino } from 'pino';
import type { Logger } from '../../../core/logger.ts';
import { configFromEnvironment, type DaemonConfigInput, loadConfig } from '../../../daemon/config.ts';
import { startDaemon } from '../../../daemon/daemon.ts';
import type { Command } from '../../command.ts';
import { numberFlag } from '../../connect.ts';

export const daemonStartCommand: Command = {
  summary: 'run the daemon in the foreground (logs to stderr)',
  usage: `gym daemon start [--config FILE] [--state-dir DIR] [--host HOST] [--port PORT] [--socket PATH]
                 [--namespace NAME] [--destroy-on-shutdown]

Configuration comes from the YAML file (--config or GYM_CONFIG), then environment variables
(GYM_STATE_DIR, GYM_HOST, GYM_PORT, GYM_SOCKET, GYM_NAMESPACE, GYM_LOG_LEVEL), then these flags.
SIGTERM or SIGINT drains in-flight requests and stops; sandboxes are kept for the next start
unless --destroy-on-shutdown.`,
  async run({ args, env, stderr }) {
    const { values } = parseArgs({
      args,
      options: {
        config: { type: 'string' },
        'state-dir': { type: 'string' },
        host: { type: 'string' },
        port: { type: 'string' },
        socket: { type: 'string' },
        namespace: { type: 'string' },
        'destroy-on-shutdown': { type: 'boolean' },
      },
    });
    const { configPath: envConfigPath, ...fromEnvironment } = configFromEnvironment(env);
    const listen: Record<string, unknown> = {};
    if (values.host !== undefined) listen.host = values.host;
    if (values.port !== undefined) listen.port = numberFlag('port', values.port);
    if (values.socket !== undefined) listen.socket = values.socket;
    const fromFlags: Partial<DaemonConfigInput> = {
      ...(values['state-dir'] === undefined ? {} : { stateDir: values['state-dir'] }),
      ...(values.namespace === undefined ? {} : { namespace: values.namespace }),
      ...(values['destroy-on-shutdown'] === undefined
        ? {}
        : { destroyOnShutdown: values['destroy-on-shutdown'] }),
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
