import { type Harness, RunClock } from './harness.ts';

/** Changes nothing and submits: the zero baseline (every verifier must give it reward 0). */
export function createNoopHarness(): Harness {
  return {
    name: 'noop',
    needsModel: false,
    async run({ limits }) {
      return new RunClock(limits).finish({
        outcome: 'submitted',
        submission: '',
        trajectory: [],
        steps: 0,
        costUsd: 0,
      });
    },
  };
}
