import { spawn } from 'node:child_process';
import { appendFile, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LineAppender, readLines } from './line-file.ts';

let directory: string;

beforeAll(async () => {
  directory = await mkdtemp(join(tmpdir(), 'line-file-'));
});

afterAll(async () => {
  await rm(directory, { recursive: true, force: true });
});

const lineOf = (label: string, bytes: number) => `${JSON.stringify({ label, fill: 'x'.repeat(bytes) })}\n`;

describe('LineAppender', () => {
  it('writes concurrent appends of a MiB each as whole lines', async () => {
    const path = join(directory, 'concurrent.jsonl');
    const appender = new LineAppender();
    const lines = Array.from({ length: 8 }, (_, index) => lineOf(`l${index}`, 1024 * 1024 + index));
    await Promise.all(lines.map((line) => appender.append(path, line)));
    const written = (await readFile(path, 'utf8')).split('\n').slice(0, -1);
    expect(written).toHaveLength(8);
    expect(new Set(written.map((line) => `${line}\n`))).toEqual(new Set(lines));
  });

  it('starts a new line after a torn last line, so the torn piece costs only itself', async () => {
    const path = join(directory, 'torn.jsonl');
    await writeFile(path, `${JSON.stringify({ a: 1 })}\n{"b":`);
    await new LineAppender().append(path, `${JSON.stringify({ c: 3 })}\n`);
    expect(await readFile(path, 'utf8')).toBe('{"a":1}\n{"b":\n{"c":3}\n');
  });

  it('cuts a write the kernel ends short back off the file (here: past the file-size limit)', async () => {
    const path = join(directory, 'limited.jsonl');
    const module = new URL('./line-file.ts', import.meta.url).pathname;
    // A child under a 4 KiB file-size limit (ulimit -f counts 512-byte blocks): the second
    // line's first write stops at the limit, the next one fails with EFBIG.
    const script = `
      process.on('SIGXFSZ', () => {});
      const { LineAppender } = await import(${JSON.stringify(module)});
      const appender = new LineAppender();
      const path = ${JSON.stringify(path)};
      await appender.append(path, 'a'.repeat(999) + '\\n');
      const failed = await appender.append(path, 'b'.repeat(19999) + '\\n').then(() => 'written', (error) => error.code);
      await appender.append(path, 'c'.repeat(99) + '\\n');
      console.log(failed);
    `;
    const child = spawn(
      'sh',
      ['-c', 'ulimit -f 8; exec "$0" --input-type=module -e "$1"', process.execPath, script],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
    expect(output.trim(), output).toBe('EFBIG');
    expect(code).toBe(0);
    expect(await readFile(path, 'utf8')).toBe(`${'a'.repeat(999)}\n${'c'.repeat(99)}\n`);
  });

  it('reports, after the appends queued before, the size a reader may read up to', async () => {
    const path = join(directory, 'settled.jsonl');
    const appender = new LineAppender();
    expect(await appender.settledSize(path)).toBe(0);
    const line = lineOf('s', 2 * 1024 * 1024);
    const writing = appender.append(path, line);
    expect(await appender.settledSize(path)).toBe(Buffer.byteLength(line));
    await writing;
  });
});

describe('readLines', () => {
  it('gives each line with its number and byte offset, a last line without newline marked torn', async () => {
    const path = join(directory, 'read.jsonl');
    await writeFile(path, 'one\n\nthré\n');
    await appendFile(path, 'partial');
    const lines = [];
    for await (const line of readLines(path)) lines.push(line);
    expect(lines).toEqual([
      { text: 'one', number: 1, offset: 0, bytes: 3, isTerminated: true },
      { text: '', number: 2, offset: 4, bytes: 0, isTerminated: true },
      { text: 'thré', number: 3, offset: 5, bytes: 5, isTerminated: true },
      { text: 'partial', number: 4, offset: 11, bytes: 7, isTerminated: false },
    ]);
    const upTo = [];
    for await (const line of readLines(path, 4)) upTo.push(line.text);
    expect(upTo).toEqual(['one']);
  });
});
