import { describe, expect, it } from 'vitest';
import { readRows } from './environment.ts';
import { inferEnvironment } from './infer-format.ts';

const published = {
  repo: 'django/django',
  instance_id: 'django__django-11099',
  base_commit: 'd26b2424437dabeeca94d7900b37d2df4410da0c',
  patch: '',
  test_patch: 'diff --git a/x b/x\n',
  version: '3.0',
  FAIL_TO_PASS: '[]',
  PASS_TO_PASS: '[]',
};

describe('telling the format of --input rows without --env', () => {
  it("takes each built-in environment's own rows for that environment", async () => {
    for (const name of ['swe-mini', 'terminal', 'mcqa']) {
      const rows = await readRows(new URL(`./${name}/data/example.jsonl`, import.meta.url).pathname);
      expect(inferEnvironment(rows, name).environment).toBe(name);
    }
    const nemo = await readRows(new URL('./mcqa/data/nemo-gym.jsonl', import.meta.url).pathname);
    expect(inferEnvironment(nemo, 'nemo-gym.jsonl')).toEqual({
      environment: 'mcqa',
      format: 'NeMo Gym question rows',
    });
    // A Harbor task directory, or a folder of them, is read into rows of its own.
    const harbor = new URL('./harbor/tasks', import.meta.url).pathname;
    for (const path of [harbor, `${harbor}/hello-file`])
      expect(inferEnvironment(await readRows(path), path)).toEqual({
        environment: 'harbor',
        format: 'Harbor task directories',
      });
  });

  it('takes published SWE-bench rows (no image, no test command) for swebench', () => {
    expect(inferEnvironment([published], 'f.jsonl')).toEqual({
      environment: 'swebench',
      format: 'SWE-bench rows',
    });
  });

  it('asks for --env when a row fits nothing or the rows mix formats', () => {
    expect(() => inferEnvironment([published, { prompt: 'hi' }], 'f.jsonl')).toThrow(
      'cannot tell which environment row 2 of f.jsonl is for (fields: prompt); give --env NAME',
    );
    expect(() => inferEnvironment([published, { question: 'q', expected_answer: 'A' }], 'f.jsonl')).toThrow(
      'f.jsonl mixes formats: row 1 looks like SWE-bench rows, row 2 like questions with expected answers; give --env NAME',
    );
    expect(() => inferEnvironment([], 'f.jsonl')).toThrow('f.jsonl holds no rows');
  });
});
