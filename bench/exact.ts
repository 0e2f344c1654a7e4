/**
 * What the bounded `output_regex` costs the exact (MCQA) verifier: a grade with the row's regex
 * (a message round trip to the one worker, started once) against one without, how long the first
 * grade takes (the worker's start), and how long a catastrophic regex holds a grade (the limit,
 * then a fresh worker) while the event loop stays free.
 *
 *   npm run bench:exact          (BENCH_EXACT_COUNT=2000 by default)
 */
import { BoundedRegexRunner } from '../environments/verifiers/bounded-regex.ts';
import { verifyExact } from '../environments/verifiers/exact.ts';
import { percentile, round, timeSequential } from './stats.ts';

const count = Number(process.env.BENCH_EXACT_COUNT ?? 2000);
const runner = new BoundedRegexRunner();
const reply = `Let me think about it step by step. ${'Some reasoning. '.repeat(200)}ANSWER IS B`;
const withRegex = { outputRegex: 'ANSWER IS\\s*([A-D])' };
try {
  const firstStarted = performance.now();
  await verifyExact(reply, 'B', withRegex, runner);
  const firstGradeMs = performance.now() - firstStarted;
  const regexSamples = await timeSequential(count, 50, () => verifyExact(reply, 'B', withRegex, runner));
  const boxed = `${reply} \\boxed{B}`;
  const plainSamples = await timeSequential(count, 50, () => verifyExact(boxed, 'B', {}, runner));
  let ticks = 0;
  const ticker = setInterval(() => {
    ticks += 1;
  }, 10);
  const overrunStarted = performance.now();
  const overrun = await verifyExact(`${'a'.repeat(40)}!`, 'A', { outputRegex: '^(a+)+$' }, runner);
  const overrunMs = performance.now() - overrunStarted;
  clearInterval(ticker);
  const afterStarted = performance.now();
  await verifyExact(reply, 'B', withRegex, runner);
  const afterOverrunMs = performance.now() - afterStarted;
  console.log(
    JSON.stringify({
      bench: 'exact',
      count,
      replyChars: reply.length,
      firstGradeMs: round(firstGradeMs),
      outputRegexGradeP50Ms: round(percentile(regexSamples, 0.5)),
      outputRegexGradeP99Ms: round(percentile(regexSamples, 0.99)),
      noRegexGradeP50Ms: round(percentile(plainSamples, 0.5)),
      noRegexGradeP99Ms: round(percentile(plainSamples, 0.99)),
      catastrophicGradeMs: round(overrunMs),
      catastrophicReward: overrun.reward,
      timerTicksDuringCatastrophic: ticks,
      gradeAfterOverrunMs: round(afterOverrunMs),
      workersStarted: runner.workersStarted,
    }),
  );
} finally {
  await runner.close();
}
