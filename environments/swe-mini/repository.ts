/**
 * Turns a swe-mini task into a git repository at a deterministic base commit (fixed author,
 * committer and dates, so the commit id is the same on the host and in the image) and derives
 * the gold patch and the test patch as `git diff` output.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import type { SweMiniTask } from './tasks.ts';

export const SWE_MINI_WORKDIR = '/testbed';
export const SWE_MINI_TEST_COMMAND = 'python3 -m pytest -rA -p no:cacheprovider tests';

/** Environment for a commit whose id depends only on the tree. */
export const DETERMINISTIC_GIT_ENV = {
  GIT_AUTHOR_NAME: 'gym',
  GIT_AUTHOR_EMAIL: 'gym@example.invalid',
  GIT_COMMITTER_NAME: 'gym',
  GIT_COMMITTER_EMAIL: 'gym@example.invalid',
  GIT_AUTHOR_DATE: '2026-01-01T00:00:00+0000',
  GIT_COMMITTER_DATE: '2026-01-01T00:00:00+0000',
};

/** The shell command that commits a directory's files as the base commit (used in the image too). */
export const BASE_COMMIT_COMMAND = 'git init -q -b main && git add -A && git commit -q -m "Initial commit"';

export interface SweRow {
  instance_id: string;
  repo: string;
  base_commit: string;
  problem_statement: string;
  patch: string;
  test_patch: string;
  FAIL_TO_PASS: string[];
  PASS_TO_PASS: string[];
  image: string;
  test_command: string;
  workdir: string;
}

function writeFiles(root: string, files: Record<string, string>): void {
  for (const [path, content] of Object.entries(files)) {
    mkdirSync(dirname(join(root, path)), { recursive: true });
    writeFileSync(join(root, path), content);
  }
}

/** A short content hash of a task's base files: the tag of its image. */
export function taskImageTag(task: SweMiniTask): string {
  return createHash('sha256')
    .update(JSON.stringify(Object.entries(task.files).sort()))
    .update(BASE_COMMIT_COMMAND)
    .digest('hex')
    .slice(0, 12);
}

export function taskImage(task: SweMiniTask): string {
  return `gym/swe-mini-${task.id}:${taskImageTag(task)}`;
}

export function buildRow(task: SweMiniTask): SweRow {
  const root = mkdtempSync(join(tmpdir(), `gym-swe-${task.id}-`));
  const git = (...args: string[]) =>
    execFileSync('git', args, {
      cwd: root,
      env: { ...process.env, ...DETERMINISTIC_GIT_ENV },
      encoding: 'utf8',
    });
  try {
    writeFiles(root, task.files);
    execFileSync('sh', ['-c', BASE_COMMIT_COMMAND], {
      cwd: root,
      env: { ...process.env, ...DETERMINISTIC_GIT_ENV },
    });
    const baseCommit = git('rev-parse', 'HEAD').trim();
    writeFiles(root, task.fix);
    git('add', '-A');
    const patch = git('diff', '--cached', '--binary', 'HEAD');
    git('reset', '-q', '--hard', 'HEAD');
    writeFiles(root, task.tests);
    git('add', '-A');
    const testPatch = git('diff', '--cached', '--binary', 'HEAD');
    return {
      instance_id: task.id,
      repo: task.repo,
      base_commit: baseCommit,
      problem_statement: task.problemStatement,
      patch,
      test_patch: testPatch,
      FAIL_TO_PASS: task.failToPass,
      PASS_TO_PASS: task.passToPass,
      image: taskImage(task),
      test_command: SWE_MINI_TEST_COMMAND,
      workdir: SWE_MINI_WORKDIR,
    };
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}
