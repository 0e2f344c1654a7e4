/**
 * How much the fuzz suites run, and from which seed. CI runs the small default budget; a longer
 * run is `npm run fuzz` (or GYM_FUZZ_RUNS=N). Every suite prints its seed, and a failure prints
 * fast-check's seed and path: GYM_FUZZ_SEED=S (and GYM_FUZZ_PATH=P) replays it exactly.
 */
import type { Parameters } from 'fast-check';

function integerFromEnv(name: string): number | undefined {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return undefined;
  const value = Number(raw);
  if (!Number.isSafeInteger(value)) throw new Error(`${name}=${raw} is not an integer`);
  return value;
}

/** One seed for the whole process (each suite derives its properties' seeds from it). */
const seed = integerFromEnv('GYM_FUZZ_SEED') ?? (Date.now() ^ (process.pid << 16)) >>> 0;
const path = process.env.GYM_FUZZ_PATH;
const runsOverride = integerFromEnv('GYM_FUZZ_RUNS');

/** True when a longer run was asked for: suites raise their test timeouts. */
export const isLongFuzz = runsOverride !== undefined;

/**
 * fast-check parameters for one property: `defaultRuns` in CI, GYM_FUZZ_RUNS when set. `salt`
 * keeps the properties of one suite from drawing the same values from the shared seed.
 */
export function fuzzParameters<T>(suite: string, defaultRuns: number, salt = 0): Parameters<T> {
  const numRuns = runsOverride ?? defaultRuns;
  const propertySeed = (seed + salt * 0x9e3779b1) | 0;
  console.log(
    `[fuzz] ${suite}: seed ${propertySeed}, ${numRuns} runs (replay: GYM_FUZZ_SEED=${seed}${path === undefined ? '' : ` GYM_FUZZ_PATH=${path}`})`,
  );
  return {
    seed: propertySeed,
    numRuns,
    ...(path === undefined ? {} : { path }),
    // Shrinking re-runs requests against a daemon whose state moved on; the first failure is the report.
    endOnFailure: true,
  };
}

/** A test timeout that grows with a longer run. */
export function fuzzTimeout(defaultMs: number): number {
  return isLongFuzz ? Math.max(defaultMs, runsOverride! * 1_000) : defaultMs;
}
