/**
 * The other end of bench:egress, in a process of its own (as a host and a sandbox are): a host on
 * 127.0.0.2 that sends N bytes to whoever connects, and a client that downloads them directly or
 * through the proxy's socket (or the Docker relay's port before it), with the same code each way. Commands arrive over IPC; each answer
 * is the milliseconds taken and the CPU milliseconds this process spent (host and client both).
 */
import { connect, createServer, type Socket } from 'node:net';

const total = Number(process.env.BENCH_EGRESS_BYTES);
const chunk = Buffer.alloc(256 * 1024, 0x61);
const host = createServer((socket) => {
  socket.on('error', () => {});
  let left = total;
  const pump = () => {
    while (left > 0) {
      const piece = left >= chunk.length ? chunk : chunk.subarray(0, left);
      left -= piece.length;
      if (!socket.write(piece)) {
        socket.once('drain', pump);
        return;
      }
    }
    socket.end();
  };
  pump();
});
await new Promise<void>((resolve) => host.listen(0, '127.0.0.2', resolve));
const hostPort = (host.address() as { port: number }).port;

/** Reads the socket to its end; counts the bytes after the CONNECT answer when there is one. */
function drain(socket: Socket, skipHeader: boolean): Promise<number> {
  return new Promise((resolve, reject) => {
    let bytes = 0;
    let header: string | null = skipHeader ? '' : null;
    socket.on('data', (data: Buffer) => {
      if (header === null) {
        bytes += data.length;
        return;
      }
      header += data.toString('latin1');
      const end = header.indexOf('\r\n\r\n');
      if (end === -1) return;
      if (!header.startsWith('HTTP/1.1 200')) reject(new Error(header.split('\r\n')[0]));
      bytes += Buffer.byteLength(header, 'latin1') - end - 4;
      header = null;
    });
    socket.on('end', () => resolve(bytes));
    socket.on('error', reject);
  });
}

process.on(
  'message',
  async (message: {
    kind: 'direct' | 'proxy' | 'relay';
    socketPath?: string;
    relayPort?: number;
    authorization?: string;
  }) => {
    const started = performance.now();
    const cpu = process.cpuUsage();
    let bytes: number;
    if (message.kind === 'direct') {
      bytes = await drain(connect({ host: '127.0.0.2', port: hostPort }), false);
    } else {
      const socket =
        message.kind === 'proxy'
          ? connect({ path: message.socketPath! })
          : connect({ host: '127.0.0.1', port: message.relayPort! });
      socket.write(
        `CONNECT download.test:${hostPort} HTTP/1.1\r\nHost: download.test:${hostPort}\r\nProxy-Authorization: ${message.authorization}\r\n\r\n`,
      );
      bytes = await drain(socket, true);
    }
    if (bytes !== total) throw new Error(`${message.kind}: ${bytes} of ${total} bytes`);
    const used = process.cpuUsage(cpu);
    process.send!({ ms: performance.now() - started, cpuMs: (used.user + used.system) / 1000 });
  },
);
process.send!({ ready: true });
