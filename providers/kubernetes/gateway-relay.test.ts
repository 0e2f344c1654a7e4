/**
 * The daemon's half of the Kubernetes gateway relay against frames an agent forges. The agent
 * shares the Pod with gym-relay (as root or its user) and can write into the relay's stdout
 * through /proc/<pid>/fd/1, so every frame the daemon reads may be the agent's. The exec stream
 * is replaced here by a function that feeds bytes to the daemon's side; the gateway is a real
 * unix socket.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { PassThrough } from 'node:stream';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { relayFrame as frame } from '../shared/gateway-relay.ts';

const exec = vi.hoisted(() => ({
  onStdout: undefined as ((chunk: Buffer) => void) | undefined,
  /** The relay's stdin as the daemon writes it; nothing reads it unless a test does (a stalled relay). */
  stdin: undefined as PassThrough | undefined,
  paused: 0,
  resumed: 0,
}));
vi.mock('./pod-exec.ts', () => ({
  startPodExec: async (
    _k: unknown,
    _t: unknown,
    _argv: unknown,
    io: { onStdout: (c: Buffer) => void; stdin: PassThrough },
  ) => {
    exec.onStdout = io.onStdout;
    exec.stdin = io.stdin;
    setImmediate(() => io.onStdout(frame('R', 0, Buffer.from([0x1f, 0x90]))));
    return {
      done: new Promise(() => {}),
      protocol: 'v5.channel.k8s.io',
      abandon: () => {},
      pause: () => {
        exec.paused += 1;
      },
      resume: () => {
        exec.resumed += 1;
      },
    };
  },
}));

const { PodRelay } = await import('./gateway-relay.ts');

function feed(bytes: Buffer): void {
  (exec.onStdout as (chunk: Buffer) => void)(bytes);
}

let dir: string;
let socketPath: string;
let gateway: Server;
let accepted: Socket[];

beforeEach(async () => {
  exec.paused = 0;
  exec.resumed = 0;
  dir = await mkdtemp(join(tmpdir(), 'gym-relay-test-'));
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

const start = (maxConnections = 4, stats = { refusedTotal: 0 }) =>
  PodRelay.start({} as never, {} as never, [], 0, socketPath, maxConnections, stats);

async function until(check: () => boolean): Promise<void> {
  for (let i = 0; i < 200 && !check(); i += 1) await new Promise((resolve) => setTimeout(resolve, 10));
}

describe('the kubernetes gateway relay against forged frames', () => {
  it('carries frames split at any byte, both ways', async () => {
    const relay = await start();
    expect(relay.port).toBe(0x1f90);
    const bytes = Buffer.concat([frame('O', 1), frame('D', 1, Buffer.from('hello gateway'))]);
    for (let i = 0; i < bytes.length; i += 1) feed(bytes.subarray(i, i + 1));
    await until(() => accepted.length === 1 && accepted[0]?.readableLength === 13);
    expect((accepted[0] as Socket).read()?.toString()).toBe('hello gateway');
    expect(relay.connections).toBe(1);
    relay.close();
  });

  it('closes the relay when an open frame reuses a live connection id, so maxConnections holds', async () => {
    const stats = { refusedTotal: 0 };
    const relay = await start(4, stats);
    feed(frame('O', 7));
    await until(() => accepted.length === 1);
    // Before the fix each of these opened one more gateway socket (the map entry overwritten).
    for (let i = 0; i < 200; i += 1) feed(frame('O', 7));
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(relay.isOpen).toBe(false);
    expect(accepted.length).toBe(1);
    expect(relay.connections).toBe(0);
  });

  it('refuses connections past maxConnections with distinct ids', async () => {
    const stats = { refusedTotal: 0 };
    const relay = await start(4, stats);
    for (let id = 1; id <= 10; id += 1) feed(frame('O', id));
    await until(() => accepted.length === 4);
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect({ accepted: accepted.length, refused: stats.refusedTotal, tracked: relay.connections }).toEqual({
      accepted: 4,
      refused: 6,
      tracked: 4,
    });
    relay.close();
  });

  it('closes the relay on a frame header announcing 4 GiB, without buffering what follows', async () => {
    const relay = await start();
    feed(Buffer.concat([frame('D', 1).subarray(0, 5), Buffer.from([0xff, 0xff, 0xff, 0xff])]));
    expect(relay.isOpen).toBe(false);
    // Before the fix these 64 MiB were kept, and re-copied for every piece (minutes of event loop).
    const piece = Buffer.alloc(64 * 1024);
    for (let i = 0; i < 1024; i += 1) feed(piece);
    expect(relay.isOpen).toBe(false);
  });

  it('closes the relay on a frame just over 32 KiB, and not on one of 32 KiB', async () => {
    const relay = await start();
    feed(frame('O', 1));
    feed(frame('D', 1, Buffer.alloc(32_768, 1)));
    await until(() => accepted[0]?.readableLength === 32_768);
    expect(relay.isOpen).toBe(true);
    feed(frame('D', 1, Buffer.alloc(32_769, 1)).subarray(0, 9));
    expect(relay.isOpen).toBe(false);
  });

  it('closes the relay on a forged ready frame without a port instead of throwing out of the stream', async () => {
    const relay = await start();
    // Before the fix: a RangeError out of the exec stream's message handler (an uncaught exception).
    expect(() => feed(frame('R', 0))).not.toThrow();
    expect(relay.isOpen).toBe(false);
  });

  it('closes the relay on a frame type the relay never sends', async () => {
    const relay = await start();
    feed(frame('X', 1));
    expect(relay.isOpen).toBe(false);
  });

  it('pauses the stream while the gateway socket takes no more, and resumes when it drains', async () => {
    const relay = await start();
    feed(frame('O', 1));
    await until(() => accepted.length === 1);
    const gatewaySide = accepted[0] as Socket;
    gatewaySide.pause();
    // The gateway does not read: the daemon's socket buffer fills past its high-water mark.
    for (let i = 0; i < 64 && exec.paused === 0; i += 1) feed(frame('D', 1, Buffer.alloc(32_768, 2)));
    expect(exec.paused).toBe(1);
    expect(exec.resumed).toBe(0);
    gatewaySide.resume();
    await until(() => exec.resumed === 1);
    expect(exec.resumed).toBe(1);
    expect(relay.isOpen).toBe(true);
    relay.close();
  });

  it('stops reading the gateway while the relay reads no stdin, so the daemon holds a bounded amount', async () => {
    const relay = await start();
    feed(frame('O', 1));
    await until(() => accepted.length === 1);
    const gatewaySide = accepted[0] as Socket;
    const stdin = exec.stdin as PassThrough;
    // The agent stopped the relay (SIGSTOP): nothing reads its stdin while the gateway answers 16 MiB.
    const answer = Buffer.alloc(1024 * 1024, 3);
    for (let i = 0; i < 16; i += 1) gatewaySide.write(answer);
    await new Promise((resolve) => setTimeout(resolve, 300));
    // Before the fix all 16 MiB were read off the gateway socket and queued on the relay's stdin.
    expect(stdin.writableLength + stdin.readableLength).toBeLessThan(256 * 1024);
    expect(gatewaySide.writableLength).toBeGreaterThan(8 * 1024 * 1024);
    // The relay reads again: the whole answer comes through.
    let received = 0;
    stdin.on('data', (chunk: Buffer) => {
      received += chunk.length;
    });
    await until(() => received >= 16 * 1024 * 1024 && gatewaySide.writableLength === 0);
    expect(received).toBeGreaterThanOrEqual(16 * 1024 * 1024);
    expect(gatewaySide.writableLength).toBe(0);
    relay.close();
  });
});
