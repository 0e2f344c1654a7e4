/** Finds the running daemon and its token from the state directory, so commands need no flags. */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { GymClient } from '../client/client.ts';
import { GymError } from '../core/errors.ts';
import { configFileStateDir, configFromEnvironment, defaultStateDir } from '../daemon/config.ts';
import { readDaemonInfo, TOKEN_FILE } from '../daemon/identity.ts';

/**
 * The state directory as the daemon resolves it: the flag, else `GYM_STATE_DIR`, else the
 * `stateDir` of the `GYM_CONFIG` file, else the default. (The file's was once skipped: a daemon
 * started with `GYM_CONFIG` was not found by the commands run with the same environment.)
 */
export function resolveStateDir(
  flag: string | undefined,
  env: Readonly<Record<string, string | undefined>>,
): string {
  return (
    flag ??
    configFromEnvironment(env).stateDir ??
    (env.GYM_CONFIG ? configFileStateDir(env.GYM_CONFIG) : undefined) ??
    defaultStateDir(env)
  );
}

/**
 * A client of the daemon found through the state directory, with `token` when given (a scoped
 * credential lent by the token holder) instead of the state directory's token file.
 */
export async function connect(stateDir: string, token?: string): Promise<GymClient> {
  const info = await readDaemonInfo(stateDir);
  if (info === null) {
    throw new GymError(
      'DAEMON_UNAVAILABLE',
      `no daemon is running for state directory ${stateDir}; start one with \`gym daemon start\` (or pass --state-dir)`,
    );
  }
  return new GymClient({
    token: token ?? (await readToken(stateDir)),
    ...(info.socket === undefined ? { url: info.url! } : { socket: info.socket }),
  });
}

/** The token file of the daemon of `stateDir`. */
export async function readToken(stateDir: string): Promise<string> {
  try {
    return (await readFile(join(stateDir, TOKEN_FILE), 'utf8')).trim();
  } catch (error) {
    throw new GymError(
      'UNAUTHORIZED',
      `cannot read the daemon's token in ${stateDir}: ${(error as Error).message} (or pass a credential with --token or GYM_TOKEN)`,
    );
  }
}

/**
 * The client a command that takes `--state-dir` and `--token` uses: the flag's credential, else
 * `GYM_TOKEN`'s, else the state directory's token file.
 */
export function connectWith(
  values: { stateDir?: string | undefined; token?: string | undefined },
  env: Readonly<Record<string, string | undefined>>,
): Promise<GymClient> {
  const token =
    values.token ?? (env.GYM_TOKEN === undefined || env.GYM_TOKEN === '' ? undefined : env.GYM_TOKEN);
  return connect(resolveStateDir(values.stateDir, env), token);
}
