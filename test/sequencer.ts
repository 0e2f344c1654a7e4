/**
 * The order test files start in. Vitest runs the files it has timings for longest first, but a
 * clean checkout (CI) has none, and it then starts larger files first: the slowest files of this
 * suite are three-line rows of a shared contract, so they would start last and leave one worker
 * running them alone at the end. This sequencer starts the files of `durations.json` (seconds
 * measured on the 2-core build machine, refreshed by `GYM_WRITE_DURATIONS=1 npm test`) longest
 * first, then the rest as vitest would.
 */
import { readFileSync } from 'node:fs';
import { relative } from 'node:path';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

const DURATIONS_PATH = new URL('./durations.json', import.meta.url);

function knownSeconds(): Record<string, number> {
  try {
    return JSON.parse(readFileSync(DURATIONS_PATH, 'utf8')) as Record<string, number>;
  } catch {
    return {};
  }
}

export class LongestFirstSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const seconds = knownSeconds();
    const base = await super.sort(files);
    const secondsOf = (spec: TestSpecification) =>
      seconds[relative(spec.project.config.root, spec.moduleId)] ?? Number.NEGATIVE_INFINITY;
    // A stable sort: files of equal (or no) known time keep vitest's order.
    return base
      .map((spec, index) => ({ spec, index, seconds: secondsOf(spec) }))
      .sort((left, right) => right.seconds - left.seconds || left.index - right.index)
      .map(({ spec }) => spec);
  }
}
