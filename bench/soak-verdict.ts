/**
 * What a soak's samples say: whether the daemon keeps growing under a steady load with churn.
 *
 * Each sample is a window's floor (the lowest reading of the window: garbage collection and
 * requests in flight raise the rest). A growth figure is the least-squares slope over the samples
 * times the span they cover, so one odd reading moves it little.
 *
 * - Descriptors and the JS heap in use have no warm-up beyond the first sample (dropped): over all
 *   the others each must grow by less than 10% of its first value (at least 32 descriptors, 8 MiB).
 *   A leak of objects or sockets shows here.
 * - RSS also holds what V8 and malloc keep for reuse, which grows into the load's working set for
 *   minutes and then levels off (a 20-minute run at 200 sandboxes: malloc's heap from 13 to 34
 *   MiB in the first 8 minutes, then not a byte, while the JS heap in use stayed at 36 MiB). It is
 *   judged over the second half of the samples: less than 10% of that half's first value (at least
 *   16 MiB). The whole run's RSS growth is reported beside it.
 */

export interface SoakSample {
  minute: number;
  rssMiB: number;
  heapUsedMiB: number;
  fds: number;
}

export interface SoakVerdict {
  verdict: 'flat' | 'growing' | 'too-few-samples';
  heapGrowthMiB: number;
  heapGrowthLimitMiB: number;
  fdGrowth: number;
  fdGrowthLimit: number;
  /** Over the second half of the samples. */
  rssGrowthMiB: number;
  rssGrowthLimitMiB: number;
  /** Over all samples but the first, for the record (not judged). */
  rssGrowthWholeRunMiB: number;
}

/** Least-squares slope of `values` against `times`. */
export function slope(times: number[], values: number[]): number {
  const meanT = times.reduce((sum, value) => sum + value, 0) / times.length;
  const meanV = values.reduce((sum, value) => sum + value, 0) / values.length;
  let numerator = 0;
  let denominator = 0;
  for (const [index, time] of times.entries()) {
    numerator += (time - meanT) * (values[index]! - meanV);
    denominator += (time - meanT) ** 2;
  }
  return denominator === 0 ? 0 : numerator / denominator;
}

/** Slope times span of one field over `samples`. */
function growth(samples: SoakSample[], field: 'rssMiB' | 'heapUsedMiB' | 'fds'): number {
  if (samples.length < 2) return 0;
  const minutes = samples.map((sample) => sample.minute);
  return (
    slope(
      minutes,
      samples.map((sample) => sample[field]),
    ) *
    (minutes.at(-1)! - minutes[0]!)
  );
}

const round = (value: number) => Math.round(value * 10) / 10;

export function soakVerdict(samples: SoakSample[]): SoakVerdict {
  const used = samples.slice(1);
  const secondHalf = used.slice(Math.floor(used.length / 2));
  const heapGrowth = growth(used, 'heapUsedMiB');
  const fdGrowth = growth(used, 'fds');
  const rssGrowth = growth(secondHalf, 'rssMiB');
  const heapLimit = Math.max(8, (used[0]?.heapUsedMiB ?? 0) * 0.1);
  const fdLimit = Math.max(32, (used[0]?.fds ?? 0) * 0.1);
  const rssLimit = Math.max(16, (secondHalf[0]?.rssMiB ?? 0) * 0.1);
  const isGrowing = heapGrowth > heapLimit || fdGrowth > fdLimit || rssGrowth > rssLimit;
  return {
    verdict: secondHalf.length < 3 ? 'too-few-samples' : isGrowing ? 'growing' : 'flat',
    heapGrowthMiB: round(heapGrowth),
    heapGrowthLimitMiB: round(heapLimit),
    fdGrowth: round(fdGrowth),
    fdGrowthLimit: round(fdLimit),
    rssGrowthMiB: round(rssGrowth),
    rssGrowthLimitMiB: round(rssLimit),
    rssGrowthWholeRunMiB: round(growth(used, 'rssMiB')),
  };
}
