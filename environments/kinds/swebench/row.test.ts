import { describe, expect, it } from 'vitest';
import { parseOrThrow } from '../../../core/validate.ts';
import { filesBeforePatch } from '../../verifiers/patch-files.ts';
import { repositorySpec, testDirectives } from './repositories.ts';
import { checkImageTemplate, looksLikeSweBench, SweBenchRowSchema, sweBenchImage } from './row.ts';

const TEST_PATCH = `diff --git a/tests/utils_tests/test_text.py b/tests/utils_tests/test_text.py
index 1111111..2222222 100644
--- a/tests/utils_tests/test_text.py
+++ b/tests/utils_tests/test_text.py
@@ -1,3 +1,4 @@
--- not a header: a removed line that started with "-- "
+import os
diff --git a/tests/utils_tests/files/data.json b/tests/utils_tests/files/data.json
new file mode 100644
index 0000000..3333333
--- /dev/null
+++ b/tests/utils_tests/files/data.json
@@ -0,0 +1 @@
+{}
diff --git a/tests/template_tests/test_new.py b/tests/template_tests/test_new.py
new file mode 100644
--- /dev/null
+++ b/tests/template_tests/test_new.py
@@ -0,0 +1 @@
+pass
`;

// A row as the published datasets have it: lists JSON-encoded, version a string, no image.
const PUBLISHED = {
  repo: 'django/django',
  instance_id: 'django__django-11099',
  base_commit: 'd26b2424437dabeeca94d7900b37d2df4410da0c',
  patch: 'diff --git a/django/x.py b/django/x.py\n',
  test_patch: TEST_PATCH,
  problem_statement: 'UsernameValidator allows trailing newline in usernames',
  hints_text: '',
  created_at: '2019-03-20T03:46:18Z',
  version: '3.0',
  FAIL_TO_PASS: '["test_ascii_validator (auth_tests.test_validators.UsernameValidatorsTests)"]',
  PASS_TO_PASS: '[]',
  environment_setup_commit: '419a78300f7cd27611196e1e464d50fd0385ff27',
};

describe('SWE-bench rows as published', () => {
  it('accepts a published row unchanged and decodes its test lists', () => {
    const row = parseOrThrow(SweBenchRowSchema, PUBLISHED, 'row 1');
    expect(row.FAIL_TO_PASS).toEqual([
      'test_ascii_validator (auth_tests.test_validators.UsernameValidatorsTests)',
    ]);
    expect(row.PASS_TO_PASS).toEqual([]);
    expect(row.version).toBe('3.0');
    expect(looksLikeSweBench(PUBLISHED)).toBe(true);
  });

  it.each([
    [{ FAIL_TO_PASS: '["a", ' }, 'FAIL_TO_PASS: must be a JSON-encoded list'],
    [{ FAIL_TO_PASS: '{"a": 1}' }, 'FAIL_TO_PASS: must be a JSON-encoded list of strings'],
    [{ version: 3 }, 'version: must be a string such as "3.0"'],
    [{ base_commit: undefined }, 'base_commit: '],
    [{ test_patch: 'not a diff' }, 'test_patch: must be a git diff'],
    [{ repo: 'django' }, 'repo: must be "owner/name"'],
  ])('names the bad field of %j', (change, message) => {
    expect(() => parseOrThrow(SweBenchRowSchema, { ...PUBLISHED, ...change }, 'row 3')).toThrow(
      `invalid row 3: ${message}`,
    );
  });
});

describe('image names', () => {
  it("follows SWE-bench's naming by default, a template or the row's own image otherwise", () => {
    const row = {
      instance_id: 'django__django-11099',
      repo: 'django/django',
      version: '3.0',
      base_commit: 'd26b2424437dabeeca94d7900b37d2df4410da0c',
    };
    expect(sweBenchImage(row, undefined, 'x86_64')).toBe('sweb.eval.x86_64.django__django-11099:latest');
    expect(sweBenchImage(row, 'swebench/sweb.eval.{arch}.{instance_id_1776}:latest', 'arm64')).toBe(
      'swebench/sweb.eval.arm64.django_1776_django-11099:latest',
    );
    expect(sweBenchImage(row, 'local/{repo_name}:{version}')).toBe('local/django:3.0');
    expect(sweBenchImage(row, 'local/{repo_owner}:{base_commit}')).toBe(
      'local/django:d26b2424437dabeeca94d7900b37d2df4410da0c',
    );
    expect(sweBenchImage({ ...row, image: 'mine:1' })).toBe('mine:1');
    expect(() => checkImageTemplate('x/{instance}:latest')).toThrow('unknown placeholder {instance}');
  });
});

describe('test command and test files per repository', () => {
  it("takes SWE-bench's command by repository and version", () => {
    expect(repositorySpec('django/django', '3.0')).toEqual({
      testCommand: './tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1',
      logParser: 'django',
      testRunner: 'django',
      evalCommands: expect.arrayContaining(['export LANG=en_US.UTF-8']),
    });
    expect(repositorySpec('django/django', '1.9')?.testCommand).toBe('./tests/runtests.py --verbosity 2');
    expect(repositorySpec('django/django', '4.0')?.evalCommands).toBeUndefined();
    expect(repositorySpec('astropy/astropy', '1.3')?.testCommand).toContain('console_output_style=classic');
    expect(repositorySpec('astropy/astropy', '5.0')).toEqual({
      testCommand: 'pytest -rA',
      logParser: 'pytest_v2',
    });
    expect(repositorySpec('sympy/sympy', '1.12')).toMatchObject({ logParser: 'sympy', testRunner: 'sympy' });
    expect(repositorySpec('psf/requests', '2.0')?.logParser).toBe('pytest_options');
    expect(repositorySpec('someone/unknown', '1.0')).toBeUndefined();
    const configured = { testCommand: 'python3 -m pytest -rA', logParser: 'pytest' as const };
    expect(repositorySpec('someone/unknown', '1.0', { 'someone/unknown': configured })).toBe(configured);
  });

  it('runs the test files of the test patch, data files left out; Django as modules', () => {
    expect(testDirectives('django/django', TEST_PATCH)).toEqual([
      'utils_tests.test_text',
      'template_tests.test_new',
    ]);
    expect(testDirectives('pallets/flask', TEST_PATCH)).toEqual([
      'tests/utils_tests/test_text.py',
      'tests/template_tests/test_new.py',
    ]);
  });

  it('resets only the files that exist before the test patch', () => {
    expect(filesBeforePatch(TEST_PATCH)).toEqual(['tests/utils_tests/test_text.py']);
  });
});
