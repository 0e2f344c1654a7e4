/** The soak's verdict on its samples: a leak is caught, an allocator settling in is not one. */
import { describe, expect, it } from 'vitest';
import { type SoakSample, soakVerdict } from './soak-verdict.ts';

/** 20 one-minute samples from functions of the minute. */
function run(
  rss: (m: number) => number,
  heap: (m: number) => number,
  fds: (m: number) => number,
): SoakSample[] {
  return Array.from({ length: 20 }, (_, index) => {
    const minute = index + 1;
    return { minute, rssMiB: rss(minute), heapUsedMiB: heap(minute), fds: fds(minute) };
  });
}

const flat = () => 36;
const wobble = (m: number) => 690 + ((m * 7) % 13);

describe('soakVerdict', () => {
  it('calls a run flat whose RSS grows for the first minutes and then levels off', () => {
    // The shape of the 20-minute run at 200 sandboxes: RSS up 70 MiB by minute 9, then a creep.
    const verdict = soakVerdict(run((m) => (m < 9 ? 160 + 8 * m : 224 + 0.5 * (m - 9)), flat, wobble));
    expect(verdict.verdict).toBe('flat');
    expect(verdict.rssGrowthWholeRunMiB).toBeGreaterThan(40);
  });

  it('catches a JS heap that keeps growing even when RSS looks flat', () => {
    const verdict = soakVerdict(
      run(
        () => 230,
        (m) => 36 + m,
        wobble,
      ),
    );
    expect(verdict.verdict).toBe('growing');
    expect(verdict.heapGrowthMiB).toBeGreaterThan(verdict.heapGrowthLimitMiB);
  });

  it('catches descriptors that keep growing', () => {
    expect(
      soakVerdict(
        run(
          () => 230,
          flat,
          (m) => 690 + 5 * m,
        ),
      ).verdict,
    ).toBe('growing');
  });

  it('catches RSS that still grows in the second half', () => {
    const verdict = soakVerdict(run((m) => 160 + 4 * m, flat, wobble));
    expect(verdict.verdict).toBe('growing');
    expect(verdict.rssGrowthMiB).toBeGreaterThan(verdict.rssGrowthLimitMiB);
  });

  it('will not judge a run too short to have a second half', () => {
    expect(soakVerdict(run(flat, flat, wobble).slice(0, 5)).verdict).toBe('too-few-samples');
  });
});
