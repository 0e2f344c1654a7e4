import { describe, expect, it } from 'vitest';
import { createId, pooledRandomBytes, SANDBOX_ID_PATTERN } from './ids.ts';

describe('ids from the pooled random bytes', () => {
  it('never hands out the same bytes twice, across many refills of the pool', () => {
    const seen = new Set<string>();
    // 20000 x 16 bytes is about 78 refills of the 4 KiB pool.
    for (let index = 0; index < 20_000; index += 1) seen.add(createId('sbx'));
    expect(seen.size).toBe(20_000);
    for (const id of [...seen].slice(0, 50)) expect(id).toMatch(SANDBOX_ID_PATTERN);
  });

  it('gives bytes that do not change after they are handed out (the pool is wiped, not the copy)', () => {
    const first = pooledRandomBytes(12);
    const copy = Buffer.from(first);
    for (let index = 0; index < 1000; index += 1) pooledRandomBytes(12);
    expect(first.equals(copy)).toBe(true);
    expect(first.equals(Buffer.alloc(12))).toBe(false);
  });

  it('serves a request larger than the pool straight from the CSPRNG', () => {
    const big = pooledRandomBytes(10_000);
    expect(big).toHaveLength(10_000);
    // 10000 zero bytes from a CSPRNG: effectively impossible.
    expect(big.equals(Buffer.alloc(10_000))).toBe(false);
  });
});
