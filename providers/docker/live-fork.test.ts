import { mkdir, mkdtemp, readdir, rm, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { clearStaleRuntimeState, sweepEngineLeftovers } from './live-fork.ts';

const made: string[] = [];
afterEach(async () => {
  for (const directory of made.splice(0)) await rm(directory, { recursive: true, force: true });
});

async function scratch(): Promise<string> {
  const directory = await mkdtemp(join(tmpdir(), 'gym-live-fork-unit-'));
  made.push(directory);
  return directory;
}

describe("the engine's checkpoint leftovers", () => {
  it('removes only old ctrd-checkpoint folders: a young one may be a start still running', async () => {
    const directory = await scratch();
    const now = Date.now();
    for (const [name, ageMs] of [
      ['ctrd-checkpoint111', 120_000],
      ['ctrd-checkpoint222', 5_000],
      ['other-folder', 120_000],
    ] as const) {
      await mkdir(join(directory, name));
      await writeFile(join(directory, name, 'checkpoint.img'), 'x');
      const at = (now - ageMs) / 1000;
      await utimes(join(directory, name), at, at);
    }
    expect(await sweepEngineLeftovers(directory, 60_000, now)).toBe(1);
    expect((await readdir(directory)).sort()).toEqual(['ctrd-checkpoint222', 'other-folder']);
    expect(await sweepEngineLeftovers(join(directory, 'missing'))).toBe(0);
  });
});

describe("runsc's stale state of a checkpointed container", () => {
  const id = 'a'.repeat(64);

  it('is removed when neither its sandbox nor its gofer process is alive', async () => {
    const root = await scratch();
    const base = join(root, `${id}_sandbox:${id}`);
    // Pids past the kernel's maximum (4194304) are never alive.
    await writeFile(`${base}.state`, JSON.stringify({ sandbox: { pid: 4_999_999 }, goferPid: 4_999_998 }));
    await writeFile(`${base}.lock`, '');
    expect(await clearStaleRuntimeState(root, id)).toBe(true);
    expect(await readdir(root)).toEqual([]);
  });

  it('is kept while a process of it is alive, and nothing is done without a state or with a bad id', async () => {
    const root = await scratch();
    const base = join(root, `${id}_sandbox:${id}`);
    await writeFile(`${base}.state`, JSON.stringify({ sandbox: { pid: process.pid }, goferPid: 4_999_998 }));
    expect(await clearStaleRuntimeState(root, id)).toBe(false);
    expect(await readdir(root)).toEqual([`${id}_sandbox:${id}.state`]);
    expect(await clearStaleRuntimeState(root, 'b'.repeat(64))).toBe(false);
    expect(await clearStaleRuntimeState(root, '../etc')).toBe(false);
  });
});
