/**
 * Issue 35, item 7, on real Docker through the daemon: a declared port is a new way in and out,
 * and the agent holds the relay's other end. As root in its sandbox it writes forged frames into
 * the running relay's stdout (`/proc/<pid>/fd/1`): an open (what a gateway relay sends to make
 * the daemon connect somewhere), then bytes for connection ids it guesses. The daemon connects
 * nowhere for it (a stand-in for the daemon's API and the host on loopback counts every
 * connection), closes that relay, and the next request through the port starts a clean one. The
 * agent's service cannot reach another sandbox's service through its relay either: the relay
 * joins only its own loopback.
 */
import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GymClient } from '../../client/client.ts';
import { startTestDaemon, type TestDaemon } from '../daemon-harness.ts';
import { dockerTestEnvironment, testImage } from '../docker-available.ts';
import { httpdServiceSpec } from '../httpd-service.ts';
import { relayBinaryForTests } from '../relay-binary.ts';

const { docker, skipReason } = await dockerTestEnvironment();

/** Writes `frames` (printf escapes) into the stdout of every port relay running in the sandbox. */
const FORGE = `
for status in /proc/[0-9]*/cmdline; do
  pid=\${status%/cmdline}; pid=\${pid#/proc/}
  case "$(tr '\\0' ' ' < /proc/$pid/cmdline 2>/dev/null)" in
    *gym-port-relay*connect*) printf "$1" > /proc/$pid/fd/1 && echo "forged into $pid" ;;
  esac
done
`;

/** An open frame for id 7 to port 7380, then a data frame for id 1 (the caller's first connection). */
const FORGED_FRAMES = '\\117\\0\\0\\0\\7\\0\\0\\0\\2\\34\\324\\104\\0\\0\\0\\1\\0\\0\\0\\5HELLO';

describe.skipIf(skipReason !== undefined)('a declared port against the agent (docker)', () => {
  let daemon: TestDaemon;
  let client: GymClient;
  let image: string;
  let bystander: Server;
  let bystanderConnections = 0;

  beforeAll(async () => {
    image = await testImage(docker, 'busybox');
    // Stands for the daemon's API and every service of the host on loopback.
    bystander = createServer((socket) => {
      bystanderConnections += 1;
      socket.destroy();
    });
    await new Promise<void>((resolve) => bystander.listen(0, '127.0.0.1', resolve));
    daemon = await startTestDaemon(
      {
        namespace: `port-adversary-${randomBytes(3).toString('hex')}`,
        providers: [{ name: 'docker', options: { relayHelperPath: relayBinaryForTests() } }],
      },
      { listen: true },
    );
    client = new GymClient({ url: daemon.address.url!, token: daemon.token });
  }, 120_000);

  afterAll(async () => {
    await daemon?.cleanup();
    bystander?.close();
  });

  const fetchPage = async (id: string) => {
    const { path, headers } = await client.portEndpoint(id, 8080);
    const response = await fetch(`${daemon.address.url}${path}index.html`, { headers });
    return { status: response.status, body: await response.text() };
  };

  it('connects nowhere for forged frames, drops that relay, and serves the next request cleanly', async () => {
    const sandbox = await client.createSandbox(httpdServiceSpec(image, 'the real page\n'));
    expect(await fetchPage(sandbox.id)).toEqual({ status: 200, body: 'the real page\n' });
    expect(await daemon.manager.ports.isRelayOpen(sandbox.id)).toBe(true);

    const forged = await client.exec(sandbox.id, { argv: ['sh', '-c', FORGE, 'forge', FORGED_FRAMES] });
    expect(forged.stdout, forged.stderr).toMatch(/^forged into \d+$/m);
    // The daemon broke off that relay (the forged open is a frame a connect-mode relay never sends).
    let isOpen = await daemon.manager.ports.isRelayOpen(sandbox.id);
    for (let attempt = 0; attempt < 100 && isOpen; attempt += 1) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      isOpen = await daemon.manager.ports.isRelayOpen(sandbox.id);
    }
    expect(isOpen).toBe(false);
    expect(bystanderConnections).toBe(0);
    // A fresh relay serves the next request, with the real page, not the forged bytes.
    expect(await fetchPage(sandbox.id)).toEqual({ status: 200, body: 'the real page\n' });
    expect(bystanderConnections).toBe(0);
    await client.destroySandbox(sandbox.id);
  });

  it("never hands the service the caller's daemon token, a scoped credential or the port key", async () => {
    // Records each request's head and answers a body: what the sandbox's service sees.
    const recorder = [
      '#!/bin/sh',
      'while read -r line; do line=$(printf %s "$line" | tr -d "\\r"); echo "$line" >> /tmp/heads; [ -z "$line" ] && break; done',
      'printf "HTTP/1.1 200 OK\\r\\nContent-Length: 3\\r\\nConnection: close\\r\\n\\r\\nok\\n"',
      '',
    ].join('\n');
    const sandbox = await client.createSandbox({
      image,
      ports: [8080],
      files: [{ path: '/recorder.sh', content: recorder, mode: 0o755 }],
      entrypoint: ['nc', '-ll', '-p', '8080', '-e', '/recorder.sh'],
    });
    const { path, headers } = await client.portEndpoint(sandbox.id, 8080);
    const scoped = await client.grantAccess({ sandboxIds: [sandbox.id], rights: ['endpoints'] });
    const send = async (authorization: string) => {
      for (let attempt = 0; attempt < 100; attempt += 1) {
        const response = await fetch(`${daemon.address.url}${path}probe`, {
          headers: { ...headers, authorization, 'x-kept': 'yes' },
        });
        if (response.status === 200) return response.text();
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      throw new Error('the recorder never answered');
    };
    expect(await send(`Bearer ${daemon.token}`)).toBe('ok\n');
    expect(await send(`Bearer ${scoped.token}`)).toBe('ok\n');
    expect(await send('Bearer the-service-own-token')).toBe('ok\n');
    const heads = (await client.exec(sandbox.id, { argv: ['cat', '/tmp/heads'] })).stdout.toLowerCase();
    expect(heads.match(/^get \/probe http\/1.1$/gm)).toHaveLength(3);
    expect(heads).not.toContain(daemon.token.toLowerCase());
    expect(heads).not.toContain(scoped.token.toLowerCase());
    expect(heads).not.toContain(Object.values(headers)[0]!.toLowerCase());
    expect(heads).not.toContain('x-gym-port-key');
    // The service's own credentials and headers pass.
    expect(heads).toContain('authorization: bearer the-service-own-token');
    expect(heads.match(/^x-kept: yes$/gm)).toHaveLength(3);
    await client.destroySandbox(sandbox.id);
  });

  it("reaches only its own sandbox's loopback: another sandbox's service is not there", async () => {
    const spec = { image, ports: [8080], files: [{ path: '/www/index.html', content: 'page\n' }] };
    const served = await client.createSandbox(httpdServiceSpec(image, 'page\n'));
    const empty = await client.createSandbox(spec);
    expect((await fetchPage(served.id)).status).toBe(200);
    const other = await fetchPage(empty.id);
    expect(other.status).toBe(502);
    expect(other.body).toMatch(/nothing accepts connections on port 8080/);
    await client.destroySandbox(served.id);
    await client.destroySandbox(empty.id);
  });
});
