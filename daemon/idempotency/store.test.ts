import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import type { Logger } from '../../core/logger.ts';
import {
  entryId,
  IDEMPOTENCY_TTL_MS,
  IdempotencyStore,
  MAX_ANSWER_BYTES,
  MAX_ENTRIES_PER_GRANT,
  MAX_KEPT_ANSWER_BYTES,
  MAX_KEPT_ANSWER_BYTES_PER_GRANT,
} from './store.ts';

const logger = pino({ level: 'silent' }) as unknown as Logger;
const directories: string[] = [];
afterEach(async () => {
  for (const directory of directories.splice(0)) await rm(directory, { recursive: true, force: true });
});

async function directory(): Promise<string> {
  const made = await mkdtemp(join(tmpdir(), 'gym-idempotency-store-'));
  directories.push(made);
  return made;
}

function clockAt(start: number) {
  const clock = { time: start, now: () => clock.time, monotonicMs: () => clock.time };
  return clock;
}

const answer = (body: string) => ({ status: 200, contentType: 'application/json', body });

describe('the idempotency store', () => {
  it('finds a request that began and never finished, after the daemon stopped, as interrupted', async () => {
    const dir = await directory();
    const clock = clockAt(1_000_000);
    const first = await IdempotencyStore.open(dir, clock, logger);
    await first.begin('a', 'token', 'exec', 'body-a');
    await first.begin('b', 'token', 'exec', 'body-b');
    first.finish('b', 'body-b', answer('{"ok":true}'));
    await first.begin('c', 'token', 'exec', 'body-c');
    first.forget('c');
    // Its lines written: 'a' has a begin and no end, as after a kill mid-request.
    await first.close();
    const second = await IdempotencyStore.open(dir, clock, logger);
    expect(second.get('a')?.state).toEqual({ kind: 'interrupted' });
    expect(second.get('b')?.state).toEqual({ kind: 'done', answer: answer('{"ok":true}') });
    expect(second.get('c')).toBeUndefined();
    await second.close();
  });

  it('forgets a key after its time, and ids differ per holder of a key', async () => {
    const dir = await directory();
    const clock = clockAt(5_000_000);
    const store = await IdempotencyStore.open(dir, clock, logger);
    await store.begin('old', 'token', 'r', null);
    store.finish('old', null, answer('{}'));
    clock.time += IDEMPOTENCY_TTL_MS + 1;
    expect(store.get('old')).toBeUndefined();
    expect(entryId('token', 'k')).not.toBe(entryId('grant-1', 'k'));
    await store.close();
  });

  it('keeps no answer over the size bound, and drops the oldest answers past the total bound, never the keys', async () => {
    const dir = await directory();
    const store = await IdempotencyStore.open(dir, clockAt(9_000_000), logger);
    await store.begin('huge', 'token', 'r', null);
    store.finish('huge', null, answer('x'.repeat(MAX_ANSWER_BYTES + 1)));
    expect(store.get('huge')?.state).toEqual({ kind: 'done', answer: null });
    const big = 'y'.repeat(MAX_ANSWER_BYTES);
    const count = Math.ceil(MAX_KEPT_ANSWER_BYTES / MAX_ANSWER_BYTES) + 2;
    for (let index = 0; index < count; index += 1) {
      await store.begin(`big-${index}`, 'token', 'r', null);
      store.finish(`big-${index}`, null, answer(big));
    }
    expect(store.keptAnswerBytes).toBeLessThanOrEqual(MAX_KEPT_ANSWER_BYTES);
    expect(store.get('big-0')?.state).toEqual({ kind: 'done', answer: null });
    expect(store.get(`big-${count - 1}`)?.state).toEqual({ kind: 'done', answer: answer(big) });
    await store.close();
  });

  it("bounds a scoped grant's kept answers: its own oldest go, never the token holder's", async () => {
    const dir = await directory();
    const store = await IdempotencyStore.open(dir, clockAt(15_000_000), logger);
    await store.begin('trainer', 'token', 'r', null);
    store.finish('trainer', null, answer('t'.repeat(1024 * 1024)));
    const big = 'a'.repeat(MAX_ANSWER_BYTES);
    const count = MAX_KEPT_ANSWER_BYTES_PER_GRANT / MAX_ANSWER_BYTES + 3;
    for (let index = 0; index < count; index += 1) {
      await store.begin(`agent-${index}`, 'grant-x', 'r', null);
      store.finish(`agent-${index}`, null, answer(big));
    }
    expect(store.get('trainer')?.state).toMatchObject({ kind: 'done', answer: { status: 200 } });
    expect(store.get('agent-0')?.state).toEqual({ kind: 'done', answer: null });
    expect(store.get(`agent-${count - 1}`)?.state).toEqual({ kind: 'done', answer: answer(big) });
    expect(store.keptAnswerBytes).toBeLessThanOrEqual(MAX_KEPT_ANSWER_BYTES_PER_GRANT + 1024 * 1024);
    await store.close();
  });

  it("bounds a scoped grant's keys to its own: past its cap its oldest go, never the token's", async () => {
    const dir = await directory();
    const store = await IdempotencyStore.open(dir, clockAt(12_000_000), logger);
    await store.begin('trainer', 'token', 'r', null);
    store.finish('trainer', null, answer('{}'));
    const begins: Array<Promise<void>> = [];
    for (let index = 0; index < MAX_ENTRIES_PER_GRANT + 50; index += 1) {
      begins.push(store.begin(`agent-${index}`, 'grant-x', 'r', null));
      store.finish(`agent-${index}`, null, answer('{}'));
    }
    await Promise.all(begins);
    expect(store.get('trainer')).toBeDefined();
    expect(store.get('agent-0')).toBeUndefined();
    expect(store.get(`agent-${MAX_ENTRIES_PER_GRANT + 49}`)).toBeDefined();
    expect(store.size).toBe(MAX_ENTRIES_PER_GRANT + 1);
    await store.close();
    // The journal is rewritten with the live entries on the next start.
    const reopened = await IdempotencyStore.open(dir, clockAt(12_000_000), logger);
    expect(reopened.size).toBe(MAX_ENTRIES_PER_GRANT + 1);
    const lines = (await readFile(join(dir, 'idempotency.jsonl'), 'utf8')).trim().split('\n');
    expect(lines).toHaveLength(2 * (MAX_ENTRIES_PER_GRANT + 1));
    await reopened.close();
  });
});
