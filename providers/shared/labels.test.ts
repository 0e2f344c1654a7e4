import { describe, expect, it } from 'vitest';
import { decodeLabels, encodeLabels, hasUserLabels, selectorLabels } from './labels.ts';

describe('labels', () => {
  it('round-trip, keeping user labels apart from ours', () => {
    const labels = encodeLabels(
      'gym.',
      {
        namespace: 'ns',
        daemonId: 'd1',
        sandboxId: 'sbx-abc',
        pool: null,
        createdAtMs: 1000,
        leaseExpiresAtMs: 2000,
        deadlineAtMs: 3000,
      },
      { 'sandbox-id': 'user value', task: 't' },
    );
    expect(labels['gym.sandbox-id']).toBe('sbx-abc');
    expect(labels['gym.user.sandbox-id']).toBe('user value');
    expect(decodeLabels('gym.', labels)).toEqual({
      id: 'sbx-abc',
      namespace: 'ns',
      daemonId: 'd1',
      pool: null,
      labels: { 'sandbox-id': 'user value', task: 't' },
      createdAt: new Date(1000).toISOString(),
      leaseExpiresAt: new Date(2000).toISOString(),
      deadlineAt: new Date(3000).toISOString(),
    });
  });

  it('recognise a resource that is not ours', () => {
    expect(decodeLabels('gym.', { 'com.example': 'x' })).toBeNull();
  });

  it('select a listing by namespace and what the filter asks, user labels under their own prefix', () => {
    expect(selectorLabels('gym.', 'ns', {})).toEqual({ 'gym.namespace': 'ns' });
    expect(selectorLabels('gym.', 'ns', { daemonId: 'd1', pool: null, labels: { pool: 'p' } })).toEqual({
      'gym.namespace': 'ns',
      'gym.daemon-id': 'd1',
      'gym.pool': '',
      'gym.user.pool': 'p',
    });
    expect(hasUserLabels({ a: '1', b: '2' }, { a: '1' })).toBe(true);
    expect(hasUserLabels({ a: '1' }, { a: '1', b: '2' })).toBe(false);
    expect(hasUserLabels({ a: '1' })).toBe(true);
  });
});
