export { percentile } from '../core/stats.ts';

export function round(value: number, digits = 3): number {
  const scale = 10 ** digits;
  return Math.round(value * scale) / scale;
}

/** Times `count` sequential runs of `body` after `warmup` untimed ones; returns milliseconds per run. */
export async function timeSequential(
  count: number,
  warmup: number,
  body: () => Promise<unknown>,
): Promise<number[]> {
  for (let index = 0; index < warmup; index += 1) await body();
  const samples: number[] = [];
  for (let index = 0; index < count; index += 1) {
    const started = performance.now();
    await body();
    samples.push(performance.now() - started);
  }
  return samples;
}
