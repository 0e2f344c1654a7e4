/** Finds the running daemon and its token from the state directory, so commands need no flags. */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { GymClient } from '../client/client.ts';
import { GymError } from '../core/errors.ts';
import { configFromEnvironment, defaultStateDir } from '../daemon/config.ts';
import { readDaemonInfo, TOKEN_FILE } from '../daemon/identity.ts';

export function resolveStateDir(
  flag: string | undefined,
  env: Readonly<Record<string, string | undefined>>,
): string {
  return flag ?? configFromEnvironment(env).stateDir ?? defaultStateDir(env);
}

export async function connect(stateDir: string): Promise<GymClient> {
  const info = await readDaemonInfo(stateDir);
  if (info === null) {
    throw new GymError(
      'DAEMON_UNAVAILABLE',
      `no daemon is running for state directory ${stateDir}; start one with \`gym daemon start\` (or pass --state-dir)`,
    );
  }
  let token: string;
  try {
    token = (await readFile(join(stateDir, TOKEN_FILE), 'utf8')).trim();
  } catch (error) {
    throw new GymError(
      'UNAUTHORIZED',
      `cannot read the daemon's token in ${stateDir}: ${(error as Error).message}`,
    );
  }
  return new GymClient({
    token,
    ...(info.socket === undefined ? { url: info.url! } : { socket: info.socket }),
  });
}

/** Parses repeated `KEY=VALUE` flags into a record, naming the flag of a malformed one. */
export function keyValues(flag: string, values: string[] | undefined): Record<string, string> {
  const result: Record<string, string> = {};
  for (const item of values ?? []) {
    const separator = item.indexOf('=');
    if (separator <= 0) throw new GymError('VALIDATION_FAILED', `--${flag} takes KEY=VALUE, got "${item}"`);
    result[item.slice(0, separator)] = item.slice(separator + 1);
  }
  return result;
}

export function numberFlag(flag: string, value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const parsed = Number(value);
  if (!Number.isFinite(parsed))
    throw new GymError('VALIDATION_FAILED', `--${flag} takes a number, got "${value}"`);
  return parsed;
}
