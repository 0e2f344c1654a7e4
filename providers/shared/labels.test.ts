import { describe, expect, it } from 'vitest';
import { decodeLabels, encodeLabels } from './labels.ts';

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
});
