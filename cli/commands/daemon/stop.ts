import { GymError } from '../../../core/errors.ts';
import { findRunningDaemon, isProcessAlive } from '../../../daemon/identity.ts';
import type { CommandOf } from '../../command.ts';
import { resolveStateDir } from '../../connect.ts';
import type { daemonStop } from './definitions.ts';

export const daemonStopCommand: CommandOf<typeof daemonStop> = {
  async run({ options: values, env, stdout }) {
    const stateDir = resolveStateDir(values.stateDir, env);
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
    const deadline = Date.now() + values.timeout * 1000;
    while (isProcessAlive(info.pid)) {
      if (Date.now() > deadline)
        throw new GymError('PROVIDER_TIMEOUT', `daemon pid ${info.pid} did not stop in time`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    stdout.write(`daemon ${info.daemonId} stopped\n`);
    return 0;
  },
};
