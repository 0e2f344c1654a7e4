/**
 * The daemon's half of the gateway relay (shared by the apptainer, enroot and kubernetes
 * providers) against an agent that stalls the relay and writes frames into its stdout. The
 * channel is replaced by a function that feeds bytes to the daemon's side; nothing reads the
 * relay's stdin (a relay the agent stopped with SIGSTOP); the gateway is a real unix socket.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { PassThrough } from 'node:stream';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { relayFrame as frame, GatewayRelay } from './gateway-relay.ts';

let dir: string;
let socketPath: string;
let gateway: Server;
let accepted: Socket[];

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'gym-shared-relay-test-'));
  socketPath = join(dir, 'gateway.sock');
  accepted = [];
  gateway = createServer((socket) => {
    accepted.push(socket);
  });
  await new Promise<void>((resolve) => gateway.listen(socketPath, resolve));
});

afterEach(async () => {
  for (const socket of accepted) socket.destroy();
  await new Promise((resolve) => gateway.close(resolve));
  await rm(dir, { recursive: true, force: true });
});

/** A relay over a fake channel whose stdin nobody reads; `feed` plays the relay's stdout. */
async function stalledRelay(maxConnections: number) {
  let onStdout!: (chunk: Buffer) => void;
  let stdin!: PassThrough;
  const relay = await GatewayRelay.start(
    async (io) => {
      onStdout = io.onStdout;
      stdin = io.stdin;
      setImmediate(() => io.onStdout(frame('R', 0, Buffer.from([0x1f, 0x90]))));
      return { done: new Promise(() => {}), pause: () => {}, resume: () => {}, abandon: () => {} };
    },
    { label: 'test', details: {} },
    socketPath,
    maxConnections,
    { refusedTotal: 0 },
  );
  return { relay, feed: (bytes: Buffer) => onStdout(bytes), stdin };
}

describe('the shared gateway relay against a stalled relay', () => {
  it('holds a bounded amount for the relay while the agent forges open frames it must refuse', async () => {
    const { relay, feed, stdin } = await stalledRelay(2);
    // The relay reads none of its stdin; the agent writes 300 000 opens past maxConnections into
    // its stdout. Before the fix each one queued a 9-byte refusal: 2.7 MB, and on without end.
    const opens = Buffer.concat(Array.from({ length: 1000 }, (_, i) => frame('O', i + 1)));
    for (let round = 0; round < 300; round += 1) {
      for (let i = 0; i < 1000; i += 1) opens.writeUInt32BE(round * 1000 + i + 1, i * 9 + 1);
      feed(opens);
    }
    expect(stdin.writableLength + stdin.readableLength).toBeLessThan(1.25 * 1024 * 1024);
    // The relay that cannot be answered is dropped; the gateway sockets it had go with it.
    expect(relay.isOpen).toBe(false);
    expect(relay.connections).toBe(0);
  });

  it('keeps a relay that refuses a few connections while its stdin is full', async () => {
    const { relay, feed, stdin } = await stalledRelay(1);
    feed(frame('O', 1));
    for (let i = 0; i < 100 && accepted.length === 0; i += 1) await new Promise((r) => setTimeout(r, 10));
    const gatewaySide = accepted[0] as Socket;
    // The gateway answers more than the stalled relay takes: the daemon stops reading it.
    gatewaySide.write(Buffer.alloc(512 * 1024, 1));
    await new Promise((resolve) => setTimeout(resolve, 200));
    // As many refusals as a real relay can ask for without reading (its 64 slots): it stays.
    for (let id = 2; id <= 64; id += 1) feed(frame('O', id));
    expect(relay.isOpen).toBe(true);
    expect(stdin.writableLength + stdin.readableLength).toBeLessThan(1024 * 1024);
    relay.close();
  });
});
