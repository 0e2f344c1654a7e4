/**
 * One evaluation as the end-to-end tests run it: a harness from the registry, no model, one
 * repeat, no resume, and the rollouts and failures read back from the files the run wrote.
 */
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { silentLogger } from '../core/logger.ts';
import { runEval } from '../environments/runner/eval.ts';
import type { EvalOptions } from '../environments/runner/eval-types.ts';
import { readJsonl } from '../environments/runner/files.ts';
import { HarnessRegistry } from '../harnesses/registry.ts';

export type TestEvalOptions = Pick<EvalOptions, 'client' | 'environment' | 'rows' | 'harnessName'> &
  Partial<Omit<EvalOptions, 'harness' | 'client' | 'environment' | 'rows' | 'harnessName'>> & {
    /** Where the output goes when `output` is not given: a fresh file named after the harness. */
    directory?: string;
  };

/** Runs `harnessName` over the rows (concurrency 2, one infra attempt unless told otherwise). */
export async function runTestEval({ directory, ...given }: TestEvalOptions) {
  if (given.output === undefined && directory === undefined)
    throw new Error('runTestEval needs an output or a directory');
  const output =
    given.output ?? join(directory!, `${given.harnessName}-${randomBytes(3).toString('hex')}.jsonl`);
  const summary = await runEval({
    harness: await new HarnessRegistry().create(given.harnessName),
    modelName: 'none',
    numRepeats: 1,
    concurrency: 2,
    resume: false,
    maxInfraAttempts: 1,
    logger: silentLogger,
    ...given,
    output,
  });
  return {
    output,
    summary,
    rollouts: await readJsonl(output),
    failures: await readJsonl(output.replace(/\.jsonl$/, '_failures.jsonl')),
  };
}
