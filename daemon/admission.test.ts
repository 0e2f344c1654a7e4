import { describe, expect, it } from 'vitest';
import { GymError } from '../core/errors.ts';
import { Admission } from './admission.ts';

describe('Admission', () => {
  it('never lets live + creating pass the live limit, and serves waiters in order', async () => {
    const admission = new Admission('p', {
      maxConcurrentCreates: 10,
      maxLiveSandboxes: 2,
      queueSize: 5,
      queueTimeoutMs: 5_000,
    });
    const first = await admission.acquire();
    const second = await admission.acquire();
    const order: number[] = [];
    const third = admission.acquire().then((slot) => {
      order.push(3);
      return slot;
    });
    const fourth = admission.acquire().then((slot) => {
      order.push(4);
      return slot;
    });
    first.succeeded();
    second.failed();
    const granted = await third;
    expect(admission.live + admission.creating).toBe(2);
    granted.succeeded();
    admission.released();
    (await fourth).succeeded();
    expect(order).toEqual([3, 4]);
    expect(admission.live).toBe(2);
  });

  it('weighs a sandbox with companion services as one container each against the live limit', async () => {
    const admission = new Admission('p', {
      maxConcurrentCreates: 10,
      maxLiveSandboxes: 4,
      queueSize: 5,
      queueTimeoutMs: 5_000,
    });
    // A sandbox with two services: three containers.
    const group = await admission.acquire(3);
    group.succeeded();
    expect(admission.live).toBe(3);
    // Another such group waits until the first is gone; a lone sandbox would have fitted.
    let isGranted = false;
    const second = admission.acquire(3).then((slot) => {
      isGranted = true;
      return slot;
    });
    expect(admission.tryAcquire(0, 2)).toBeNull();
    await Promise.resolve();
    expect(isGranted).toBe(false);
    admission.released(3);
    (await second).succeeded();
    expect(admission.live).toBe(3);
    // A group heavier than the whole limit is refused at once, not queued forever.
    await expect(admission.acquire(5)).rejects.toMatchObject({ code: 'CAPACITY_EXCEEDED' });
    expect(admission.queued).toBe(0);
  });

  it('limits concurrent creates separately from live sandboxes', async () => {
    const admission = new Admission('p', {
      maxConcurrentCreates: 1,
      maxLiveSandboxes: 100,
      queueSize: 5,
      queueTimeoutMs: 5_000,
    });
    const first = await admission.acquire();
    let isSecondGranted = false;
    const second = admission.acquire().then((slot) => {
      isSecondGranted = true;
      return slot;
    });
    await new Promise((resolve) => setTimeout(resolve, 10));
    expect(isSecondGranted).toBe(false);
    first.succeeded();
    (await second).succeeded();
    expect(admission.live).toBe(2);
  });

  it('refuses with CAPACITY_EXCEEDED and a retry hint when the queue is full or the wait too long', async () => {
    const admission = new Admission('p', {
      maxConcurrentCreates: 1,
      maxLiveSandboxes: 1,
      queueSize: 1,
      queueTimeoutMs: 50,
    });
    await admission.acquire();
    const waiting = admission.acquire();
    const full = await admission.acquire().catch((error: unknown) => error);
    expect(full).toBeInstanceOf(GymError);
    expect((full as GymError).code).toBe('CAPACITY_EXCEEDED');
    expect((full as GymError).httpStatus).toBe(429);
    expect((full as GymError).details.retryAfterMs).toBeGreaterThan(0);
    const timedOut = await waiting.catch((error: unknown) => error);
    expect((timedOut as GymError).message).toContain('within 50 ms');
    expect(admission.queued).toBe(0);
  });
});
