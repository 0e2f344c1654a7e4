/**
 * A short-lived helper, run as `nsenter -t <pid> -n node netns-listener.ts <port>` with an IPC
 * channel: it listens on 127.0.0.1:<port> inside that network namespace (port 0: any free one),
 * hands the listening socket and its port to its parent (the daemon) over the channel, and exits
 * once the parent lets go of it.
 * A socket keeps the namespace it was made in, so the daemon then accepts connections made inside
 * the sandbox from its own event loop, with no process per connection.
 *
 * It imports nothing of ours: it must start fast and run with no more than Node itself.
 */
import { createServer } from 'node:net';

/** The parent normally takes the handle within milliseconds; past this, give up rather than linger. */
const HANDOVER_TIMEOUT_MS = 10_000;

const port = Number(process.argv[2]);
const send = process.send?.bind(process);
if (send === undefined || !Number.isInteger(port) || port < 0 || port > 65535) {
  console.error('usage: node netns-listener.ts <port, 0 for any free one> (with an IPC channel)');
  process.exit(2);
}
const timer = setTimeout(() => process.exit(3), HANDOVER_TIMEOUT_MS);
process.once('disconnect', () => {
  clearTimeout(timer);
  process.exit(0);
});
const server = createServer();
server.once('error', (error: NodeJS.ErrnoException) => {
  send({ type: 'error', code: error.code ?? null, message: error.message }, undefined, {}, () =>
    process.exit(1),
  );
});
server.listen({ host: '127.0.0.1', port }, () => {
  send({ type: 'listening', port: (server.address() as { port: number }).port }, server);
});
