import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { formatDuration, leftText, remainingAtRate, startTicker, Timings } from './progress.ts';

afterEach(() => {
  vi.useRealTimers();
});

function capture(isTTY: boolean): { stream: PassThrough & { isTTY?: boolean }; text: () => string } {
  const stream = Object.assign(new PassThrough(), { isTTY });
  const chunks: Buffer[] = [];
  stream.on('data', (chunk: Buffer) => chunks.push(chunk));
  return { stream, text: () => Buffer.concat(chunks).toString() };
}

describe('progress text', () => {
  it('formats durations and what is left', () => {
    expect(formatDuration(400)).toBe('0 s');
    expect(formatDuration(45_200)).toBe('45 s');
    expect(formatDuration(185_000)).toBe('3 min 05 s');
    expect(formatDuration(3_720_000)).toBe('1 h 02 min');
    expect(leftText(20_000, 61_000)).toBe('about 41 s left');
    expect(leftText(70_000, 61_000)).toBe('past the usual 1 min 01 s');
    expect(leftText(70_000, undefined)).toBe('');
  });

  it('estimates the time left at the rate so far', () => {
    expect(remainingAtRate(60_000, 0, 10)).toBeUndefined();
    expect(remainingAtRate(60_000, 3, 10)).toBe(140_000);
    expect(remainingAtRate(60_000, 10, 10)).toBe(0);
  });
});

describe('startTicker', () => {
  it('redraws one line every second on a terminal and clears it at the end', () => {
    vi.useFakeTimers();
    const { stream, text } = capture(true);
    let now = 0;
    const ticker = startTicker(stream, (elapsedMs) => `building: ${formatDuration(elapsedMs)}`, {
      now: () => now,
    });
    now = 1000;
    vi.advanceTimersByTime(1000);
    now = 2000;
    vi.advanceTimersByTime(1000);
    ticker.stop('built');
    expect(text()).toBe('\r\x1b[2Kbuilding: 0 s\r\x1b[2Kbuilding: 1 s\r\x1b[2Kbuilding: 2 s\r\x1b[2Kbuilt\n');
    vi.advanceTimersByTime(5000);
    expect(text().endsWith('built\n')).toBe(true);
  });

  it('writes a plain line now and then elsewhere, none at the start', () => {
    vi.useFakeTimers();
    const { stream, text } = capture(false);
    let now = 0;
    const ticker = startTicker(stream, (elapsedMs) => `still building: ${formatDuration(elapsedMs)}`, {
      now: () => now,
    });
    now = 15_000;
    vi.advanceTimersByTime(15_000);
    ticker.stop();
    expect(text()).toBe('still building: 15 s\n');
  });
});

describe('Timings', () => {
  let directory: string | undefined;
  afterEach(async () => {
    if (directory !== undefined) await rm(directory, { recursive: true, force: true });
  });

  it('remembers the last duration of each kind of work, and treats a bad file as no history', async () => {
    directory = await mkdtemp(join(tmpdir(), 'gym-timings-'));
    const stateDir = join(directory, 'state');
    const timings = new Timings(stateDir);
    expect(await timings.get('image debian-base')).toBeUndefined();
    await timings.record('image debian-base', 61_234.4);
    await timings.record('image busybox', 900);
    expect(await new Timings(stateDir).get('image debian-base')).toBe(61_234);
    expect(await timings.get('image busybox')).toBe(900);
    await writeFile(join(stateDir, 'timings.json'), '{not json');
    expect(await timings.get('image busybox')).toBeUndefined();
  });
});
