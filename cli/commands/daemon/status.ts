import { readDaemonInfo } from '../../../daemon/identity.ts';
import type { CommandOf } from '../../command.ts';
import { connect, resolveStateDir } from '../../connect.ts';
import type { daemonStatus } from './definitions.ts';

export const daemonStatusCommand: CommandOf<typeof daemonStatus> = {
  async run({ options: values, env, stdout }) {
    const stateDir = resolveStateDir(values.stateDir, env);
    const client = await connect(stateDir);
    const [info, health, sandboxes] = await Promise.all([
      readDaemonInfo(stateDir),
      client.health(),
      client.listSandboxes(),
    ]);
    if (values.json) {
      stdout.write(`${JSON.stringify({ ...info, health, sandboxes: sandboxes.length })}\n`);
      return health.ok ? 0 : 1;
    }
    stdout.write(
      `daemon ${health.daemonId} (v${health.version}), pid ${info?.pid}, at ${info?.url ?? info?.socket}\n`,
    );
    stdout.write(`state directory ${stateDir}; ${sandboxes.length} sandboxes\n`);
    for (const [name, provider] of Object.entries(health.providers)) {
      stdout.write(`provider ${name}: ${provider.ok ? 'ok' : 'DOWN'} (${provider.message})\n`);
    }
    return health.ok ? 0 : 1;
  },
};
