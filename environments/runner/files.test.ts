import { constants } from 'node:buffer';
import { mkdir, mkdtemp, open, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createJsonlAppender, readJsonl, writeJsonlAtomic } from './files.ts';

let directory = '';
beforeAll(async () => {
  directory = await mkdtemp(join(tmpdir(), 'gym-jsonl-'));
});
afterAll(async () => {
  await rm(directory, { recursive: true, force: true });
});

describe('rollout files', () => {
  // Seen: a rollouts file past Node's largest string read as empty (any read error was taken for
  // "no file"), and the run then rewrote it from that empty list, losing every rollout.
  it('reads a file larger than the largest string, line by line', async () => {
    const path = join(directory, 'large.jsonl');
    const line = `${JSON.stringify({ _ng_task_index: 0, reward: 1, model_calls: ['x'.repeat(1024 * 1024)] })}\n`;
    const count = Math.ceil(constants.MAX_STRING_LENGTH / line.length) + 1;
    const file = await open(path, 'w');
    for (let index = 0; index < count; index += 1) await file.write(line);
    await file.close();
    try {
      const rows = await readJsonl(path);
      expect(rows.length).toBe(count);
    } finally {
      await rm(path, { force: true });
    }
  }, 120_000);

  it('has no rows for a missing file, skips a torn last line, and throws on other errors', async () => {
    expect(await readJsonl(join(directory, 'missing.jsonl'))).toEqual([]);
    const torn = join(directory, 'torn.jsonl');
    await writeFile(torn, '{"a":1}\n{"a":2}\n{"a":');
    expect(await readJsonl(torn)).toEqual([{ a: 1 }, { a: 2 }]);
    const folder = join(directory, 'a-folder.jsonl');
    await mkdir(folder);
    await expect(readJsonl(folder)).rejects.toMatchObject({ code: 'EISDIR' });
  });

  it('replaces a file whole, never leaving it half written', async () => {
    const path = join(directory, 'rewrite.jsonl');
    await writeFile(path, '{"old":true}\n');
    await writeJsonlAtomic(path, [{ n: 1 }, { n: 2 }]);
    expect(await readFile(path, 'utf8')).toBe('{"n":1}\n{"n":2}\n');
    const unwritable = (function* () {
      yield { n: 3 };
      throw new Error('disk full');
    })();
    await expect(writeJsonlAtomic(path, unwritable)).rejects.toThrow('disk full');
    expect(await readFile(path, 'utf8')).toBe('{"n":1}\n{"n":2}\n');
  });
});

describe('appending rollout lines', () => {
  // Seen (issue 19, finding 7, in the gateway): appendFile writes a large line in 512 KiB pieces,
  // so rollouts finishing at once (each carrying MiBs of model calls) interleaved and every one
  // of them was lost to resume, reverify and the trainer.
  it('keeps every line whole when large rows are appended at once', async () => {
    const path = join(directory, 'concurrent.jsonl');
    const appendJsonl = createJsonlAppender();
    const rows = Array.from({ length: 8 }, (_, index) => ({
      _ng_task_index: index,
      model_calls: [String(index).repeat(3 * 1024 * 1024)],
    }));
    await Promise.all(rows.map((row) => appendJsonl(path, row)));
    const read = await readJsonl(path);
    expect(read.map((row) => row._ng_task_index).sort()).toEqual(rows.map((row) => row._ng_task_index));
    await rm(path, { force: true });
  });

  it('starts a new line after a line torn by a crash, so the next row is not lost with it', async () => {
    const path = join(directory, 'torn.jsonl');
    await writeFile(path, `${JSON.stringify({ _ng_task_index: 0 })}\n{"_ng_task_index": 1, "mod`);
    await createJsonlAppender()(path, { _ng_task_index: 2 });
    expect((await readJsonl(path)).map((row) => row._ng_task_index)).toEqual([0, 2]);
    await rm(path, { force: true });
  });
});
