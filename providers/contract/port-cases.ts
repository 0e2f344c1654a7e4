import type { Duplex } from 'node:stream';
import { expect, it as vitestIt } from 'vitest';
import { SandboxSpecSchema } from '../../core/schemas/sandbox.ts';
import type { PortRelay } from '../shared/port-relay.ts';
import { requireSpecCapabilities } from '../shared/spec-capabilities.ts';
import type { SandboxFixture } from './fixture.ts';

const ECHO_PORT = 18_080;

/**
 * An echo server on 127.0.0.1:$1 in the sandbox, in the background: busybox `nc` where it has
 * `-e`, else Python (a Debian image without busybox).
 */
const ECHO_SERVER = `
if nc --help 2>&1 | grep -q -- '-e PROG'; then
  nc -ll -p "$1" -e cat </dev/null >/dev/null 2>&1 &
  exit 0
fi
if command -v python3 >/dev/null 2>&1; then
  python3 -c '
import socket, sys, threading
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("127.0.0.1", int(sys.argv[1])))
server.listen()
def echo(connection):
    while True:
        data = connection.recv(65536)
        if not data:
            break
        connection.sendall(data)
    connection.close()
while True:
    threading.Thread(target=echo, args=(server.accept()[0],), daemon=True).start()
' "$1" </dev/null >/dev/null 2>&1 &
  exit 0
fi
echo 'the contract image needs busybox nc or python3 for the port cases' >&2; exit 127
`;

/** Sends `payload`, half-closes, and resolves with all that came back before the end. */
function roundTrip(connection: Duplex, payload: Buffer): Promise<Buffer> {
  const chunks: Buffer[] = [];
  return new Promise((resolve, reject) => {
    connection.on('data', (chunk: Buffer) => chunks.push(chunk));
    connection.once('end', () => resolve(Buffer.concat(chunks)));
    connection.once('error', reject);
    connection.end(payload);
  });
}

/** An echo through the relay, asked again while the server in the sandbox is still starting. */
async function echoOnceListening(relay: PortRelay, payload: Buffer): Promise<Buffer> {
  for (let attempt = 1; ; attempt += 1) {
    try {
      return await roundTrip(relay.connect(ECHO_PORT), payload);
    } catch (error) {
      if ((error as { code?: string }).code !== 'ECONNREFUSED' || attempt >= 100) throw error;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
}

/**
 * Declared ports (`openPortRelay`): a connection the daemon opens reaches a service on the
 * sandbox's own loopback, whole and both ways, in a sandbox without network; a port where
 * nothing listens is refused; each sandbox's relay reaches its own sandbox alone. Without the
 * `ports` capability, each case checks that such a spec is refused instead.
 */
export function definePortCases(fixture: SandboxFixture): void {
  const it = (name: string, body: () => Promise<void>) =>
    vitestIt(name, async () => {
      const { provider } = fixture;
      if (provider.capabilities.ports !== true || provider.openPortRelay === undefined) {
        // Without the capability a spec that declares ports is refused before the provider sees
        // it, naming the capability (the daemon's check): never a sandbox whose ports are dead.
        expect(() =>
          requireSpecCapabilities(
            'under-test',
            provider.capabilities,
            SandboxSpecSchema.parse({ image: 'any', ports: [ECHO_PORT] }),
          ),
        ).toThrow(
          expect.objectContaining({
            code: 'CAPABILITY_UNSUPPORTED',
            details: expect.objectContaining({ capability: 'ports' }),
          }),
        );
        return;
      }
      await body();
    });

  it('carries a connection to a service on the sandbox loopback, every byte both ways', async () => {
    const info = await fixture.create({ ports: [ECHO_PORT] });
    const started = await fixture.exec(info.id, {
      argv: ['sh', '-c', ECHO_SERVER, 'echo-server', String(ECHO_PORT)],
    });
    expect(started.exitCode, started.stderr).toBe(0);
    const relay = await fixture.provider.openPortRelay!(info.id);
    try {
      expect((await echoOnceListening(relay, Buffer.from('ping'))).toString()).toBe('ping');
      // More than one frame, and more than the pipes hold: framing and backpressure both ways.
      const big = Buffer.alloc(1024 * 1024);
      for (let index = 0; index < big.length; index += 1) big[index] = index % 251;
      expect((await roundTrip(relay.connect(ECHO_PORT), big)).equals(big)).toBe(true);
    } finally {
      relay.close();
    }
  });

  it('refuses a port where nothing listens, and reaches only its own sandbox', async () => {
    const [served, empty] = await Promise.all([
      fixture.create({ ports: [ECHO_PORT] }),
      fixture.create({ ports: [ECHO_PORT] }),
    ]);
    const started = await fixture.exec(served.id, {
      argv: ['sh', '-c', ECHO_SERVER, 'echo-server', String(ECHO_PORT)],
    });
    expect(started.exitCode, started.stderr).toBe(0);
    const own = await fixture.provider.openPortRelay!(served.id);
    const other = await fixture.provider.openPortRelay!(empty.id);
    try {
      expect((await echoOnceListening(own, Buffer.from('mine'))).toString()).toBe('mine');
      // The other sandbox's relay connects to its own loopback, where nothing listens.
      await expect(roundTrip(other.connect(ECHO_PORT), Buffer.from('x'))).rejects.toMatchObject({
        code: 'ECONNREFUSED',
      });
    } finally {
      own.close();
      other.close();
    }
  });
}
