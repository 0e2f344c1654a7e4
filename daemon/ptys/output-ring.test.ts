import { describe, expect, it } from 'vitest';
import { OutputRing } from './output-ring.ts';

describe('OutputRing', () => {
  it('reads from any absolute offset still held', () => {
    const ring = new OutputRing(16);
    ring.write(Buffer.from('hello '));
    ring.write(Buffer.from('world'));
    expect(ring.read(0, 100)).toEqual({ data: Buffer.from('hello world'), offset: 0, dropped: 0 });
    expect(ring.read(6, 100).data.toString()).toBe('world');
    expect(ring.read(6, 3).data.toString()).toBe('wor');
    expect(ring.read(11, 100)).toEqual({ data: Buffer.alloc(0), offset: 11, dropped: 0 });
    // Past the end: nothing yet, from the end.
    expect(ring.read(50, 100).offset).toBe(11);
  });

  it('keeps only its capacity and reports what a late reader missed', () => {
    const ring = new OutputRing(8);
    ring.write(Buffer.from('0123456789'));
    ring.write(Buffer.from('abc'));
    expect(ring.start).toBe(5);
    expect(ring.end).toBe(13);
    expect(ring.heldBytes).toBe(8);
    expect(ring.read(0, 100)).toEqual({ data: Buffer.from('56789abc'), offset: 5, dropped: 5 });
    expect(ring.read(undefined, 100).data.toString()).toBe('56789abc');
  });

  it('holds no more than its capacity however much is written', () => {
    const ring = new OutputRing(1024);
    const chunk = Buffer.alloc(4096, 0x61);
    for (let round = 0; round < 1000; round += 1) ring.write(chunk.subarray(0, 1 + (round % 4096)));
    expect(ring.heldBytes).toBeLessThanOrEqual(1024);
    expect(ring.read(ring.start, 10_000).data.length).toBe(ring.heldBytes);
    ring.write(Buffer.alloc(10_000, 0x62));
    expect(ring.heldBytes).toBe(1024);
    expect(ring.read(0, 10_000).data.equals(Buffer.alloc(1024, 0x62))).toBe(true);
  });
});
