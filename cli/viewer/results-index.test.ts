import { appendFile, mkdtemp, rename, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ResultsIndex } from './results-index.ts';

const line = (id: string, reward = 1) =>
  JSON.stringify({ instance_id: id, reward, _gym: { outcome: 'reward', note: 'é'.repeat(3) } });

describe('the results index', () => {
  let folder: string;
  let path: string;
  beforeEach(async () => {
    folder = await mkdtemp(join(tmpdir(), 'gym-results-index-'));
    path = join(folder, 'results.jsonl');
  });
  afterEach(() => rm(folder, { recursive: true, force: true }));

  const tasks = async (index: ResultsIndex) => (await index.summaries()).map((summary) => summary.task);

  it('follows a file that grows, a half-written line only once it is whole, and reads each line back by position', async () => {
    await writeFile(path, `${line('a')}\n${line('b')}\r\n`);
    const index = new ResultsIndex(path);
    expect(await tasks(index)).toEqual(['a', 'b']);
    const next = line('c', 0);
    await appendFile(path, next.slice(0, 10));
    expect(await tasks(index)).toEqual(['a', 'b']);
    await appendFile(path, `${next.slice(10)}\n\n{"torn": \n${line('d')}\n`);
    expect(await tasks(index)).toEqual(['a', 'b', 'c', 'd']);
    expect((await index.summaries()).map((summary) => summary.position)).toEqual([0, 1, 2, 3]);
    expect(await index.line(2)).toMatchObject({ instance_id: 'c', reward: 0 });
    expect(await index.line(1)).toMatchObject({ instance_id: 'b', _gym: { note: 'ééé' } });
    expect(await index.line(4)).toBeUndefined();
  });

  it('reads a file replaced by a rename (the runner sorting it) from the start, and a last line without its newline', async () => {
    await writeFile(path, `${line('b')}\n${line('a')}\n`);
    const index = new ResultsIndex(path);
    expect(await tasks(index)).toEqual(['b', 'a']);
    await writeFile(`${path}.tmp`, `${line('a')}\n${line('b')}\n${line('c')}`);
    await rename(`${path}.tmp`, path);
    expect(await tasks(index)).toEqual(['a', 'b', 'c']);
    expect(await index.line(2)).toMatchObject({ instance_id: 'c' });
    // The last line gets its newline and another follows: counted once.
    await appendFile(path, `\n${line('d')}\n`);
    expect(await tasks(index)).toEqual(['a', 'b', 'c', 'd']);
    await rm(path);
    expect(await tasks(index)).toEqual([]);
  });
});
