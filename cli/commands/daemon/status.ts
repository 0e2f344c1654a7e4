import { parseArgs } from 'node:util';
import { readDaemonInfo } from '../../../daemon/identity.ts';
import type { Command } from '../../command.ts';
import { connect, resolveStateDir } from '../../connect.ts';

export const daemonStatusCommand: Command = {
  summary: "show whether the daemon runs, where, and its providers' health",
  usage: 'gym daemon status [--state-dir DIR] [--json]',
  async run({ args, env, stdout }) {
    const { values } = parseArgs({
      args,
      options: { 'state-dir': { type: 'string' }, json: { type: 'boolean', default: false } },
    });
    const stateDir = resolveStateDir(values['state-dir'], env);
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
