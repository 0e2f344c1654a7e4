/**
 * The daemon's half of a sandbox's port relay against what an agent can write into the relay's
 * stdout (as root, or as the relay's user, through /proc/<pid>/fd/1, or by replacing the relay):
 * whatever it sends, the daemon connects nothing anywhere (it only ever answers the caller's own
 * connections), a frame the relay never sends closes the channel, and bytes go only to the
 * connection they name. The channel is a fake that plays the relay's stdout and records its stdin.
 */
import type { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { relayFrame as frame } from './gateway-relay.ts';
import { PortRelay } from './port-relay.ts';

/** A relay over a fake channel: `feed` plays its stdout, `sent` is what the daemon wrote to its stdin. */
async function fakeRelay(ready: Buffer = frame('R', 0, Buffer.alloc(2))) {
  let onStdout!: (chunk: Buffer) => void;
  let stdin!: PassThrough;
  let abandoned = false;
  const sent: Buffer[] = [];
  const relay = await PortRelay.start(
    async (io) => {
      onStdout = io.onStdout;
      stdin = io.stdin;
      stdin.on('data', (chunk: Buffer) => sent.push(chunk));
      setImmediate(() => io.onStdout(ready));
      return {
        done: new Promise(() => {}),
        pause: () => {},
        resume: () => {},
        abandon: () => {
          abandoned = true;
        },
      };
    },
    { label: 'test', details: {} },
  );
  return {
    relay,
    feed: (bytes: Buffer) => onStdout(bytes),
    sent: () => Buffer.concat(sent),
    isAbandoned: () => abandoned,
  };
}

const flush = () => new Promise((resolve) => setImmediate(resolve));

describe('the port relay, daemon side', () => {
  it('opens a connection with the port in its open frame, and delivers only its own bytes', async () => {
    const { relay, feed, sent } = await fakeRelay();
    const first = relay.connect(8080);
    const second = relay.connect(9090);
    await flush();
    const port = (value: number) => Buffer.from([value >> 8, value & 0xff]);
    expect(sent()).toEqual(Buffer.concat([frame('O', 1, port(8080)), frame('O', 2, port(9090))]));
    const got: string[] = [];
    first.on('data', (chunk: Buffer) => got.push(`1:${chunk}`));
    second.on('data', (chunk: Buffer) => got.push(`2:${chunk}`));
    feed(
      Buffer.concat([
        frame('D', 2, Buffer.from('b')),
        frame('D', 1, Buffer.from('a')),
        frame('D', 7, Buffer.from('x')),
      ]),
    );
    await flush();
    expect(got.sort()).toEqual(['1:a', '2:b']);
    relay.close();
  });

  it('refuses a relay that listens instead (one older than connect mode)', async () => {
    await expect(fakeRelay(frame('R', 0, Buffer.from([0x1f, 0x90])))).rejects.toMatchObject({
      code: 'PROVIDER_ERROR',
      message: expect.stringMatching(/older than connect mode/),
    });
  });

  it.each([
    ['an open frame (a gateway relay asks the daemon to connect; this one never does)', frame('O', 99)],
    ['a second ready frame', frame('R', 0, Buffer.alloc(2))],
    ['an unknown type', frame('Z', 1)],
    ['a frame longer than 32 KiB, refused from its header', frame('D', 1).subarray(0, 5)],
  ])('closes the channel and every connection on %s', async (_name, forged) => {
    const { relay, feed, isAbandoned } = await fakeRelay();
    const connection = relay.connect(8080);
    const failed = new Promise((resolve) => connection.once('error', resolve));
    const bytes =
      forged.length === 5 ? Buffer.concat([forged, Buffer.from([0x00, 0x01, 0x00, 0x00])]) : forged;
    feed(bytes);
    await failed;
    expect(relay.isOpen).toBe(false);
    expect(isAbandoned()).toBe(true);
    expect(() => relay.connect(8080)).toThrow(/closed/);
  });

  it('reports a refusal of the relay as ECONNREFUSED on that connection alone', async () => {
    const { relay, feed } = await fakeRelay();
    const refused = relay.connect(1);
    const other = relay.connect(2);
    const error = new Promise<{ code?: string }>((resolve) => refused.once('error', resolve));
    feed(frame('X', 1));
    expect((await error).code).toBe('ECONNREFUSED');
    expect(relay.isOpen).toBe(true);
    expect(other.destroyed).toBe(false);
    relay.close();
  });

  it('carries at most 64 connections at once', async () => {
    const { relay } = await fakeRelay();
    for (let index = 0; index < 64; index += 1) relay.connect(8080);
    expect(() => relay.connect(8080)).toThrow(expect.objectContaining({ code: 'CAPACITY_EXCEEDED' }));
    relay.close();
    expect(relay.connections).toBe(0);
  });
});
