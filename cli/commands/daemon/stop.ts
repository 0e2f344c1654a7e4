import { parseArgs } from 'node:util';
import { GymError } from '../../../core/errors.ts';
import { findRunningDaemon, isProcessAlive } from '../../../daemon/identity.ts';
import type { Command } from '../../command.ts';
import { numberFlag, resolveStateDir } from '../../connect.ts';

export const daemonStopCommand: Command = {
  summary: 'stop the daemon gracefully (it drains requests; sandboxes are kept)',
  usage: 'gym daemon stop [--state-dir DIR] [--timeout SECONDS]',
  async run({ args, env, stdout }) {
    const { values } = parseArgs({
      args,
      options: { 'state-dir': { type: 'string' }, timeout: { type: 'string', default: '60' } },
    });
    const stateDir = resolveStateDir(values['state-dir'], env);
    // Only a pid proven to be this state directory's daemon is signalled, never whatever pid a
    // stale daemon.json names (after a kill -9 or a reboot it may be anyone's process).
    const { info, staleInfo } = await findRunningDaemon(stateDir);
    if (info === null) {
      const stale =
        staleInfo === undefined ? '' : ` (removed a stale daemon.json naming pid ${staleInfo.pid})`;
      stdout.write(`no daemon is running for ${stateDir}${stale}\n`);
      return 0;
    }
    process.kill(info.pid, 'SIGTERM');
    const deadline = Date.now() + (numberFlag('timeout', values.timeout) ?? 60) * 1000;
    while (isProcessAlive(info.pid)) {
      if (Date.now() > deadline)
        throw new GymError('PROVIDER_TIMEOUT', `daemon pid ${info.pid} did not stop in time`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    stdout.write(`daemon ${info.daemonId} stopped\n`);
    return 0;
  },
};
