/**
 * The exact verifier under hostile answers: the row's `output_regex` and the fixed readings must
 * finish on any text the model writes, and the process must stay responsive while they run.
 */
import { afterAll, describe, expect, it } from 'vitest';
import type { HarnessResult } from '../../harnesses/harness.ts';
import { loadEnvironment } from '../environment.ts';
import type { VerifyContext } from '../kinds/kind.ts';
import { BoundedRegexRunner, REGEX_TIME_LIMIT_MS } from './bounded-regex.ts';
import { extractAnswer, verifyExact } from './exact.ts';

const runner = new BoundedRegexRunner();
afterAll(() => runner.close());

describe('exact verifier on hostile answers', () => {
  it('grades 0 with a reason an answer on which the row regex backtracks catastrophically, the event loop free meanwhile', async () => {
    const exact = (await loadEnvironment('mcqa')).implementation;
    const row = {
      question: 'Q?',
      expected_answer: 'A',
      template_metadata: { output_regex: '^(a+)+$' },
    };
    const submission = `${'a'.repeat(40)}!`;
    let ticks = 0;
    const ticker = setInterval(() => {
      ticks += 1;
    }, 20);
    const verdict = await exact
      .verify({
        row,
        harnessResult: { outcome: 'submitted', submission, steps: 1 } as HarnessResult,
      } as unknown as VerifyContext)
      .finally(() => clearInterval(ticker));
    expect(verdict).toMatchObject({
      outcome: 'reward',
      reward: 0,
      details: { extracted_answer: null, expected_answer: 'A' },
    });
    expect(String(verdict.details.reason)).toMatch(
      new RegExp(`output_regex could not read this answer: .*past its ${REGEX_TIME_LIMIT_MS} ms limit`),
    );
    // Before, the match ran on the main thread: no timer fired until it ended (in days).
    expect(ticks).toBeGreaterThan(0);
    // The stuck worker was replaced: the next answer is graded as usual.
    const next = await exact.verify({
      row: { ...row, template_metadata: { output_regex: 'answer is ([A-D])' } },
      harnessResult: { outcome: 'submitted', submission: 'the answer is A', steps: 1 },
    } as unknown as VerifyContext);
    expect(next).toMatchObject({ reward: 1, details: { extracted_answer: 'A' } });
  });

  it('keeps one worker for every grade and starts another only after an overrun', async () => {
    const grading = { outputRegex: 'ANSWER IS\\s*([A-D])' };
    expect(await extractAnswer('ANSWER IS B', grading, runner)).toBe('B');
    expect(await extractAnswer('ANSWER IS C or ANSWER IS D', grading, runner)).toBe('D');
    // An empty match repeats at every position without looping forever; the last one is kept.
    expect(await extractAnswer('xyz', { outputRegex: 'q*' }, runner)).toBeNull();
    expect(runner.workersStarted).toBe(1);
    const verdict = await verifyExact(`${'a'.repeat(40)}!`, 'A', { outputRegex: '^(a+)+$' }, runner);
    expect(verdict.details.reason).toMatch(/past its/);
    expect(await verifyExact('ANSWER IS A', 'A', grading, runner)).toMatchObject({ reward: 1 });
    expect(runner.workersStarted).toBe(2);
  });

  it('reads \\text{} wrappers in linear time: a long run of spaces in a box once held the event loop for minutes', async () => {
    // The old `^\\text\{\s*([\s\S]*?)\s*\}$` was cubic here (8,000 spaces: a minute; these: hours).
    const spaces = ' '.repeat(50_000);
    expect(await extractAnswer(`\\boxed{\\text{${spaces}x}}`)).toBeNull();
    expect(await extractAnswer(`\\boxed{\\text{${spaces}B${spaces}}}`)).toBe('B');
    expect(await extractAnswer('\\boxed{\\text{ \\text{\tC } }}')).toBe('C');
    expect(await extractAnswer('\\boxed{\\text{}}')).toBeNull();
    const lenient = { options: [{ A: 'Stack' }, { B: 'Queue' }], gradingMode: 'lenient_boxed' as const };
    expect(await extractAnswer(`\\boxed{\\text{${spaces}queue${spaces}}}`, lenient)).toBe('B');
  });
});
