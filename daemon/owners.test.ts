/**
 * The owner registry on a host shared with other users: its directory must be one only this uid
 * can write, its records are written without following links, and a record another user could
 * have planted (a link, a FIFO, a file of theirs) is ignored, so nobody can make a live daemon
 * look gone (its peers would destroy its sandboxes) or have a root daemon write through a link.
 * "Another user" is uid 65534 (nobody), by chown, so those cases need root.
 */
import { execFileSync } from 'node:child_process';
import {
  chmod,
  chown,
  lstat,
  mkdir,
  mkdtemp,
  readdir,
  readFile,
  rm,
  stat,
  symlink,
  writeFile,
} from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { GymError } from '../core/errors.ts';
import type { Logger } from '../core/logger.ts';
import {
  defaultOwnersDirectory,
  ensureOwnersDirectory,
  type HostProcesses,
  type OwnerRecord,
  OwnerRegistry,
} from './owners.ts';

const NOBODY = 65534;
const isRoot = process.getuid?.() === 0;
const NOW_MS = Date.parse('2026-01-01T00:00:00Z');
const GRACE_MS = 60_000;
const PEER = 'daemon_peer';

/** One boot, one pid namespace; only this process is alive. */
const host: HostProcesses = {
  startTime: async (pid) => (pid === process.pid ? 'me' : null),
  bootId: async () => 'boot-a',
  pidNamespace: async () => 'ns-a',
};

const cleanups: string[] = [];
afterEach(async () => {
  for (const directory of cleanups.splice(0)) await rm(directory, { recursive: true, force: true });
});

async function scratch(): Promise<string> {
  const directory = await mkdtemp(join(tmpdir(), 'gym-owners-unit-'));
  cleanups.push(directory);
  return directory;
}

function registry(directory: string, daemonId = 'daemon_me') {
  const warnings: Array<Record<string, unknown>> = [];
  const logger: Logger = {
    trace: () => {},
    debug: () => {},
    info: () => {},
    warn: (object: unknown) => void warnings.push(object as Record<string, unknown>),
    error: () => {},
    child: () => logger,
  };
  const owners = new OwnerRegistry({
    daemonId,
    directory,
    graceMs: GRACE_MS,
    pruneAfterMs: 24 * 3600_000,
    clock: { now: () => NOW_MS, monotonicMs: () => 0 },
    logger,
    host,
  });
  return { owners, warnings };
}

/** A record that proves its daemon gone: an earlier boot, a heartbeat well past the grace. */
function forged(daemonId = PEER): string {
  const record: OwnerRecord = {
    daemonId,
    pid: 1,
    processStartTime: '1',
    bootId: 'boot-earlier',
    pidNamespace: 'ns-a',
    hostname: 'h',
    heartbeatAtMs: NOW_MS - 2 * GRACE_MS,
  };
  return JSON.stringify(record);
}

async function refusal(promise: Promise<unknown>): Promise<GymError> {
  const error = await promise.then(
    () => undefined,
    (caught: unknown) => caught,
  );
  expect(error).toBeInstanceOf(GymError);
  return error as GymError;
}

describe('defaultOwnersDirectory', () => {
  it('is /run/gym/daemons for root on Linux, never the shared tmp directory', () => {
    expect(
      defaultOwnersDirectory({ uid: 0, env: { XDG_RUNTIME_DIR: '/run/user/0' }, platform: 'linux' }),
    ).toBe('/run/gym/daemons');
  });

  it("is the user's runtime directory when set (absolute), else the per-uid tmp location", () => {
    expect(
      defaultOwnersDirectory({ uid: 1000, env: { XDG_RUNTIME_DIR: '/run/user/1000' }, platform: 'linux' }),
    ).toBe('/run/user/1000/gym-daemons');
    expect(
      defaultOwnersDirectory({ uid: 1000, env: { XDG_RUNTIME_DIR: 'relative' }, platform: 'linux' }),
    ).toBe(join(tmpdir(), 'gym-daemons-1000'));
    expect(defaultOwnersDirectory({ uid: 1000, env: {}, platform: 'linux' })).toBe(
      join(tmpdir(), 'gym-daemons-1000'),
    );
    expect(defaultOwnersDirectory({ uid: 0, env: {}, platform: 'darwin' })).toBe(
      join(tmpdir(), 'gym-daemons-0'),
    );
  });
});

describe('the registry directory', () => {
  it('is created 0700 with its missing parents, each 0700 and ours', async () => {
    const base = await scratch();
    const directory = join(base, 'a', 'b', 'daemons');
    await registry(directory).owners.heartbeat();
    for (const path of [join(base, 'a'), join(base, 'a', 'b'), directory]) {
      const info = await lstat(path);
      expect(info.isDirectory()).toBe(true);
      expect(info.mode & 0o777).toBe(0o700);
      expect(info.uid).toBe(process.getuid?.());
    }
    expect(await readdir(directory)).toEqual(['daemon_me.json']);
    expect((await stat(join(directory, 'daemon_me.json'))).mode & 0o777).toBe(0o600);
  });

  it('has a looser mode of ours tightened to 0700', async () => {
    const directory = join(await scratch(), 'daemons');
    await mkdir(directory);
    await chmod(directory, 0o777);
    await registry(directory).owners.heartbeat();
    expect((await lstat(directory)).mode & 0o777).toBe(0o700);
  });

  it('is refused when it is a symbolic link, even to a directory of ours', async () => {
    const base = await scratch();
    await mkdir(join(base, 'real'), { mode: 0o700 });
    await symlink(join(base, 'real'), join(base, 'daemons'));
    const error = await refusal(registry(join(base, 'daemons')).owners.heartbeat());
    expect(error.code).toBe('VALIDATION_FAILED');
    expect(error.message).toContain('symbolic link');
    expect(error.message).toContain('owners.directory');
    expect(await readdir(join(base, 'real'))).toEqual([]);
  });

  it('is refused when it is not a directory', async () => {
    const directory = join(await scratch(), 'daemons');
    await writeFile(directory, '');
    const error = await refusal(ensureOwnersDirectory(directory));
    expect(error.message).toContain('not a directory');
  });

  it('is refused under an ancestor other users can write (not sticky), accepted under a sticky one', async () => {
    const base = await scratch();
    await mkdir(join(base, 'open'));
    await chmod(join(base, 'open'), 0o777);
    const error = await refusal(ensureOwnersDirectory(join(base, 'open', 'daemons')));
    expect(error.message).toContain(`its ancestor ${join(base, 'open')} is writable by other users`);
    expect(error.details).toMatchObject({ setting: 'owners.directory' });
    await expect(readdir(join(base, 'open'))).resolves.toEqual([]);

    await mkdir(join(base, 'sticky'));
    await chmod(join(base, 'sticky'), 0o1777);
    await ensureOwnersDirectory(join(base, 'sticky', 'daemons'));
    expect((await lstat(join(base, 'sticky', 'daemons'))).mode & 0o777).toBe(0o700);
  });

  it.skipIf(!isRoot)(
    "is refused when another user owns it, and nothing is written through the links planted in it (the reviewer's attack)",
    async () => {
      const base = await scratch();
      const directory = join(base, 'daemons');
      await mkdir(directory, { mode: 0o1777 });
      await chmod(directory, 0o1777);
      await chown(directory, NOBODY, NOBODY);
      const victim = join(base, 'victim');
      await writeFile(victim, 'root only\n', { mode: 0o600 });
      // The name the old heartbeat wrote through: `<record>.<pid>.tmp`.
      await symlink(victim, join(directory, `daemon_me.json.${process.pid}.tmp`));
      const error = await refusal(registry(directory).owners.heartbeat());
      expect(error.code).toBe('VALIDATION_FAILED');
      expect(error.message).toContain(directory);
      expect(error.message).toContain(`belongs to uid ${NOBODY}`);
      expect(error.message).toContain('owners.directory');
      expect(await readFile(victim, 'utf8')).toBe('root only\n');
      expect((await readdir(directory)).sort()).toEqual([`daemon_me.json.${process.pid}.tmp`]);
    },
  );

  it.skipIf(!isRoot)('is refused under an ancestor another user owns (they could swap it)', async () => {
    const base = await scratch();
    await mkdir(join(base, 'theirs'), { mode: 0o755 });
    await chown(join(base, 'theirs'), NOBODY, NOBODY);
    const error = await refusal(registry(join(base, 'theirs', 'daemons')).owners.heartbeat());
    expect(error.message).toContain(`its ancestor ${join(base, 'theirs')} belongs to uid ${NOBODY}`);
    expect(await readdir(join(base, 'theirs'))).toEqual([]);
  });
});

describe('records', () => {
  it('are written through a fresh file, never through a link planted at a predictable name', async () => {
    const base = await scratch();
    const directory = join(base, 'daemons');
    await mkdir(directory, { mode: 0o700 });
    const victim = join(base, 'victim');
    await writeFile(victim, 'untouched\n', { mode: 0o600 });
    await symlink(victim, join(directory, `daemon_me.json.${process.pid}.tmp`));
    const { owners } = registry(directory);
    await owners.heartbeat();
    await owners.heartbeat();
    expect(await readFile(victim, 'utf8')).toBe('untouched\n');
    const record = await lstat(join(directory, 'daemon_me.json'));
    expect(record.isFile()).toBe(true);
    expect(record.mode & 0o777).toBe(0o600);
    // No temporary file is left behind.
    expect((await readdir(directory)).sort()).toEqual([
      'daemon_me.json',
      `daemon_me.json.${process.pid}.tmp`,
    ]);
    expect(await owners.read('daemon_me')).toMatchObject({ daemonId: 'daemon_me', pid: process.pid });
  });

  it('of ours that prove a peer gone are believed', async () => {
    const directory = await scratch();
    await writeFile(join(directory, `${PEER}.json`), forged(), { mode: 0o600 });
    expect(await registry(directory).owners.isGone(PEER)).toBe(true);
  });

  it('that are symbolic links are ignored with a warning', async () => {
    const directory = await scratch();
    const elsewhere = await scratch();
    await writeFile(join(elsewhere, 'record.json'), forged());
    await symlink(join(elsewhere, 'record.json'), join(directory, `${PEER}.json`));
    const { owners, warnings } = registry(directory);
    expect(await owners.isGone(PEER)).toBe(false);
    expect(await owners.isGone(PEER)).toBe(false);
    expect(warnings).toEqual([{ path: join(directory, `${PEER}.json`), problem: 'is a symbolic link' }]);
  });

  it('that are not regular files (a FIFO would block a plain read) are ignored with a warning', async () => {
    const directory = await scratch();
    execFileSync('mkfifo', [join(directory, `${PEER}.json`)]);
    const { owners, warnings } = registry(directory);
    expect(await owners.read(PEER)).toBeNull();
    expect(warnings).toEqual([{ path: join(directory, `${PEER}.json`), problem: 'is not a regular file' }]);
  }, 5_000);

  it.skipIf(!isRoot)(
    'of another user (forged: another boot, an old heartbeat) are ignored with a warning',
    async () => {
      const directory = await scratch();
      const path = join(directory, `${PEER}.json`);
      await writeFile(path, forged(), { mode: 0o644 });
      await chown(path, NOBODY, NOBODY);
      const { owners, warnings } = registry(directory);
      expect(await owners.isGone(PEER)).toBe(false);
      expect(warnings).toEqual([{ path, problem: `belongs to uid ${NOBODY}, not to this user (uid 0)` }]);
      // Nor are they pruned as a long-gone peer's.
      await owners.heartbeat();
      expect((await readdir(directory)).sort()).toEqual(['daemon_me.json', `${PEER}.json`]);
    },
  );

  it.skipIf(!isRoot)('in a directory another user took over are ignored', async () => {
    const directory = await scratch();
    await writeFile(join(directory, `${PEER}.json`), forged(), { mode: 0o600 });
    await chown(directory, NOBODY, NOBODY);
    const { owners, warnings } = registry(directory);
    expect(await owners.isGone(PEER)).toBe(false);
    expect(warnings).toHaveLength(1);
  });
});
