import { describe, expect, it } from 'vitest';
import type { LoadedEnvironment } from '../../environment.ts';
import { kind, sweBenchOptions } from './kind.ts';

const ROW = {
  repo: 'pytoolz/toolz',
  instance_id: 'pytoolz__toolz-1',
  base_commit: 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa',
  patch: '',
  test_patch: 'diff --git a/t.py b/t.py\n',
  problem_statement: 'fix it',
  version: '0.12',
  FAIL_TO_PASS: '["t.py::test_a"]',
  PASS_TO_PASS: '[]',
};

const environment = (options: Record<string, unknown>) =>
  ({ name: 'test', options }) as unknown as LoadedEnvironment;

describe('the swebench kind', () => {
  it("refuses, before any sandbox, a repository neither SWE-bench's table nor the options describe", () => {
    expect(() => kind.checkRow!(ROW, environment({}))).toThrow(/no test command for repo "pytoolz\/toolz"/);
    const known = { repositories: { 'pytoolz/toolz': { testCommand: 'pytest -rA', logParser: 'pytest' } } };
    expect(() => kind.checkRow!(ROW, environment(known))).not.toThrow();
    expect(() => kind.checkRow!({ ...ROW, repo: 'django/django' }, environment({}))).not.toThrow();
  });

  it('names the image by the template and checks the options', () => {
    expect(kind.image(ROW, environment({ imageTemplate: 'img/{repo_name}:{version}' }))).toBe(
      'img/toolz:0.12',
    );
    expect(kind.image({ ...ROW, image: 'own:1' }, environment({}))).toBe('own:1');
    expect(() => sweBenchOptions(environment({ imageTemplate: 'x:{nope}' }))).toThrow(
      'unknown placeholder {nope}',
    );
    expect(() =>
      sweBenchOptions(environment({ repositories: { 'a/b': { testCommand: 'x', logParser: 'junit' } } })),
    ).toThrow('repositories.a/b.logParser');
    const withRunner = (testRunner: string) =>
      sweBenchOptions(
        environment({ repositories: { 'a/b': { testCommand: 'x', logParser: 'django', testRunner } } }),
      );
    expect(withRunner('django').repositories['a/b']).toMatchObject({ testRunner: 'django' });
    expect(() => withRunner('nose')).toThrow('repositories.a/b.testRunner');
  });

  it('gives the agent the problem statement in /testbed, the oracle the gold patch', () => {
    const task = kind.task({ ...ROW, patch: 'diff' }, environment({}), { usesGoldPatch: true });
    expect(task).toEqual({
      id: 'pytoolz__toolz-1',
      instruction: 'fix it',
      workdir: '/testbed',
      goldPatch: 'diff',
    });
  });
});
