import { describe, expect, it } from 'vitest';
import { RolloutTable } from './rollouts.ts';

const upstream = { baseUrl: 'http://127.0.0.1:9/v1' } as never;
const none = async () => 0;

describe('RolloutTable.authorize', () => {
  it("takes a bound rollout's calls only from its own sandbox or from outside every sandbox", async () => {
    const table = new RolloutTable();
    const { rolloutId, key } = await table.open('bound-1', upstream, none, 'sbx-aaaaaaaa');
    expect(table.authorize(rolloutId, key, 'sbx-aaaaaaaa').id).toBe(rolloutId);
    expect(table.authorize(rolloutId, key, undefined).id).toBe(rolloutId);
    // Another sandbox with the right key is answered as a wrong key is.
    expect(() => table.authorize(rolloutId, key, 'sbx-bbbbbbbb')).toThrow(
      /no open rollout with this id and key/,
    );
    expect(() => table.authorize(rolloutId, `${key}x`, 'sbx-aaaaaaaa')).toThrow(
      /no open rollout with this id and key/,
    );
  });

  it("takes an unbound rollout's calls from any holder of its key, as before", async () => {
    const table = new RolloutTable();
    const { rolloutId, key } = await table.open(undefined, upstream, none);
    expect(table.authorize(rolloutId, key, 'sbx-bbbbbbbb').id).toBe(rolloutId);
    expect(table.authorize(rolloutId, key).id).toBe(rolloutId);
  });
});
