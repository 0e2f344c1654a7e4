import { describe, expect, it } from 'vitest';
import { isGymError } from '../../core/errors.ts';
import { RunKeys } from './run-keys.ts';

describe('RunKeys', () => {
  it('drops the oldest answers for room but keeps their keys: a repeat is refused, never run again', async () => {
    const keys = new RunKeys({ maxAnswerBytes: 300 });
    let runs = 0;
    const run = (size: number) => async () => {
      runs += 1;
      return { text: 'x'.repeat(size) };
    };
    await keys.answer('a', { id: 1 }, run(200));
    await keys.answer('b', { id: 2 }, run(200));
    expect(keys.size().answerBytes).toBeLessThanOrEqual(300);
    const repeat = await keys.answer('a', { id: 1 }, run(200)).catch((error: unknown) => error);
    expect(isGymError(repeat, 'IDEMPOTENT_OUTCOME_UNKNOWN')).toBe(true);
    expect((await keys.answer('b', { id: 2 }, run(200))).replayed).toBe(true);
    expect(runs).toBe(2);
  });

  it('keeps at most maxKeys keys, forgetting the oldest', async () => {
    const keys = new RunKeys({ maxKeys: 2 });
    for (const key of ['a', 'b', 'c']) await keys.answer(key, {}, async () => ({ key }));
    expect(keys.size().keys).toBe(2);
    expect((await keys.answer('c', {}, async () => ({ key: 'again' }))).answer).toEqual({ key: 'c' });
    expect((await keys.answer('a', {}, async () => ({ key: 'again' }))).answer).toEqual({ key: 'again' });
  });
});
