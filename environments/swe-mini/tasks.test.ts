import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { buildRow } from './repository.ts';
import { SWE_MINI_TASKS } from './tasks.ts';

describe('swe-mini data', () => {
  it('has at least 12 tasks, and the committed rows match what tasks.ts generates (no drift)', () => {
    const committed = readFileSync(new URL('./data/example.jsonl', import.meta.url), 'utf8')
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line));
    expect(SWE_MINI_TASKS.length).toBeGreaterThanOrEqual(12);
    expect(committed).toEqual(SWE_MINI_TASKS.map(buildRow));
  });

  it('keeps the hidden tests out of the repository and every listed test in the test patch or the repository', () => {
    for (const task of SWE_MINI_TASKS) {
      for (const path of Object.keys(task.tests))
        expect(task.files, `${task.id} ships ${path}`).not.toHaveProperty([path]);
      for (const id of [...task.failToPass, ...task.passToPass]) {
        const [file, name] = id.split('::') as [string, string];
        const source = task.tests[file] ?? task.files[file] ?? '';
        expect(source, `${task.id}: ${id}`).toContain(`def ${name}(`);
      }
    }
  });
});
