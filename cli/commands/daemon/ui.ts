import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { GymError } from '../../../core/errors.ts';
import { readDaemonInfo, TOKEN_FILE } from '../../../daemon/identity.ts';
import type { CommandOf } from '../../command.ts';
import { resolveStateDir } from '../../connect.ts';
import type { daemonUi } from './definitions.ts';

/**
 * Asks the daemon for a one-time login link to /ui and prints it: the browser gets a session
 * cookie from it, never the token (which would stay in its history and the daemon's logs).
 */
export const daemonUiCommand: CommandOf<typeof daemonUi> = {
  async run({ options: values, env, stdout }) {
    const stateDir = resolveStateDir(values.stateDir, env);
    const info = await readDaemonInfo(stateDir);
    if (info === null)
      throw new GymError('DAEMON_UNAVAILABLE', `no daemon is running for state directory ${stateDir}`);
    if (info.url === undefined)
      throw new GymError(
        'VALIDATION_FAILED',
        `the daemon serves only the unix socket ${info.socket}; a browser needs it on TCP (listen.host and listen.port)`,
      );
    const token = (await readFile(join(stateDir, TOKEN_FILE), 'utf8')).trim();
    const response = await fetch(`${info.url}/ui/login-links`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}` },
    });
    if (response.status !== 201)
      throw new GymError(
        'DAEMON_UNAVAILABLE',
        `the daemon refused a login link: ${response.status} ${await response.text()}`,
      );
    const { path } = (await response.json()) as { path: string };
    stdout.write(`open ${info.url}${path}\n(the link works once, within 60 s)\n`);
    return 0;
  },
};
