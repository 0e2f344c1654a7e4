/**
 * The parsers of `gym daemon` and its verbs: name, arguments, options and help. The bodies
 * import their option types from here; `index.ts` pairs each parser with its body.
 */
import { Command, Option } from '@commander-js/extra-typings';
import { integer, positiveNumber } from '../../arguments.ts';
import { jsonOption, stateDirOption } from '../../options.ts';

export const daemonStart = () =>
  new Command('start')
    .summary('run the daemon in the foreground (logs to stderr)')
    .description(
      `Run the daemon in the foreground, logging to stderr.

Configuration comes from the YAML file (--config or GYM_CONFIG), then environment variables (GYM_STATE_DIR, GYM_HOST, GYM_PORT, GYM_SOCKET, GYM_NAMESPACE, GYM_LOG_LEVEL), then these flags. SIGTERM or SIGINT drains in-flight requests and stops; sandboxes are kept for the next start unless --destroy-on-shutdown.`,
    )
    .option('--config <FILE>', 'YAML configuration file')
    .addOption(stateDirOption())
    .option('--host <HOST>', 'TCP address to listen on')
    .addOption(new Option('--port <PORT>', 'TCP port (0: any free port)').argParser(integer(0, 65_535)))
    .option('--socket <PATH>', 'listen on a unix socket instead of TCP')
    .option('--namespace <NAME>', "label namespace of this daemon's sandboxes")
    .option('--destroy-on-shutdown', 'destroy every sandbox when stopping');

export const daemonStatus = () =>
  new Command('status')
    .summary("show whether the daemon runs, where, and its providers' health")
    .addOption(stateDirOption())
    .addOption(jsonOption());

export const daemonUi = () =>
  new Command('ui')
    .summary("print a login link to the daemon's page of sandboxes and pools (/ui); it works once, for 60 s")
    .addOption(stateDirOption());

export const daemonStop = () =>
  new Command('stop')
    .summary('stop the daemon gracefully (it drains requests; sandboxes are kept)')
    .addOption(stateDirOption())
    .addOption(
      new Option('--timeout <SECONDS>', 'how long to wait for it to stop')
        .argParser(positiveNumber)
        .default(60),
    );
