import { describe, expect, it } from 'vitest';
import { OutputCapture, truncationMarker } from './output-capture.ts';

function feed(capture: OutputCapture, text: string, chunkSize: number): void {
  for (let offset = 0; offset < text.length; offset += chunkSize) {
    capture.push(Buffer.from(text.slice(offset, offset + chunkSize)));
  }
}

describe('OutputCapture', () => {
  it('keeps everything under the cap, unflagged', () => {
    const capture = new OutputCapture(100);
    feed(capture, 'hello world', 3);
    expect(capture.toString()).toBe('hello world');
    expect(capture.isTruncated).toBe(false);
    expect(capture.totalBytes).toBe(11);
  });

  it('keeps exactly the cap when output equals it', () => {
    const text = 'x'.repeat(50) + 'y'.repeat(50);
    const capture = new OutputCapture(100);
    feed(capture, text, 7);
    expect(capture.toString()).toBe(text);
    expect(capture.isTruncated).toBe(false);
  });

  for (const chunkSize of [1, 7, 64, 1000, 100_000]) {
    it(`keeps head and tail with a marker (chunks of ${chunkSize})`, () => {
      const text = Array.from({ length: 5000 }, (_, index) => String.fromCharCode(97 + (index % 26))).join(
        '',
      );
      const capture = new OutputCapture(200);
      feed(capture, text, chunkSize);
      expect(capture.isTruncated).toBe(true);
      expect(capture.totalBytes).toBe(5000);
      expect(capture.toString()).toBe(text.slice(0, 100) + truncationMarker(4800) + text.slice(-100));
    });
  }

  it('handles an odd cap', () => {
    const capture = new OutputCapture(65);
    feed(capture, '0123456789'.repeat(20), 13);
    const kept = capture.toString();
    expect(kept.startsWith('0123456789'.repeat(3).slice(0, 33))).toBe(true);
    expect(kept.endsWith('0123456789'.repeat(4).slice(-32))).toBe(true);
    expect(kept).toContain(truncationMarker(200 - 65));
  });
});
