/**
 * Streamed exec (`?stream=ndjson`) under a client that reads slowly or goes away (issue 9, item 4):
 * the stream carries no more than the output cap, and a client that leaves cancels its command.
 */

import { randomBytes } from 'node:crypto';
import { request as httpRequest } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestDaemon, type TestDaemon } from '../daemon-harness.ts';
import { dockerTestEnvironment, testImage } from '../docker-available.ts';
import { waitFor } from '../wait-for.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const busybox = skipReason === undefined ? await testImage(docker, 'busybox') : 'gym/busybox:missing';

describe.skipIf(skipReason !== undefined)('streamed exec under hostile clients', () => {
  let daemon: TestDaemon;
  let sandboxId: string;

  beforeAll(async () => {
    daemon = await startTestDaemon(
      { namespace: `stream-${randomBytes(4).toString('hex')}` },
      { listen: true },
    );
    const created = await fetch(`${daemon.address.url}/v1/sandboxes`, {
      method: 'POST',
      headers: { ...daemon.auth, 'content-type': 'application/json' },
      body: JSON.stringify({ image: busybox }),
    });
    expect(created.status).toBe(201);
    sandboxId = ((await created.json()) as { id: string }).id;
  });

  afterAll(async () => {
    await daemon?.cleanup();
    if (sandboxId !== undefined) {
      const containers = await docker.listContainers({
        all: true,
        filters: { label: [`gym.sandbox-id=${sandboxId}`] },
      });
      for (const container of containers) await docker.getContainer(container.Id).remove({ force: true });
    }
  });

  const execUrl = () => `${daemon.address.url}/v1/sandboxes/${sandboxId}/exec?stream=ndjson`;

  async function exec(command: string): Promise<{ status: string; stdout: string }> {
    const response = await fetch(`${daemon.address.url}/v1/sandboxes/${sandboxId}/exec`, {
      method: 'POST',
      headers: { ...daemon.auth, 'content-type': 'application/json' },
      body: JSON.stringify({ command, timeoutMs: 10_000 }),
    });
    return (await response.json()) as { status: string; stdout: string };
  }

  it('streams no more output than the cap, and the result keeps head and tail', async () => {
    const cap = 64 * 1024;
    const response = await fetch(execUrl(), {
      method: 'POST',
      headers: { ...daemon.auth, 'content-type': 'application/json' },
      body: JSON.stringify({ command: 'yes abcdefgh | head -c 20000000', maxOutputBytes: cap }),
    });
    expect(response.status).toBe(200);
    const events = (await response.text())
      .split('\n')
      .filter((line) => line !== '')
      .map((line) => JSON.parse(line) as { type: string; data?: string; result?: Record<string, unknown> });
    const streamed = events
      .filter((event) => event.type === 'stdout')
      .reduce((sum, event) => sum + Buffer.byteLength(event.data ?? ''), 0);
    expect(streamed).toBeGreaterThan(0);
    expect(streamed).toBeLessThanOrEqual(cap);
    const result = events.at(-1)!;
    expect(result.type).toBe('result');
    expect(result.result).toMatchObject({ status: 'ok', stdoutTruncated: true, stdoutBytes: 20_000_000 });
  });

  it('refuses a bad body with an HTTP error, not an event', async () => {
    const response = await fetch(execUrl(), {
      method: 'POST',
      headers: { ...daemon.auth, 'content-type': 'application/json' },
      body: JSON.stringify({ command: 'true', argv: ['true'] }),
    });
    expect(response.status).toBe(400);
    expect(((await response.json()) as { error: { code: string } }).error.code).toBe('VALIDATION_FAILED');
  });

  it('kills the command when the client goes away', async () => {
    const marker = `gone-${randomBytes(4).toString('hex')}`;
    await new Promise<void>((resolve, reject) => {
      const body = JSON.stringify({ command: `sleep 45; echo ${marker}`, timeoutMs: 60_000 });
      const request = httpRequest(execUrl(), {
        method: 'POST',
        headers: {
          ...daemon.auth,
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(body),
        },
      });
      request.on('response', (response) => {
        response.once('data', () => {});
        // Leave once the command is surely running.
        setTimeout(() => {
          request.destroy();
          resolve();
        }, 1_000);
      });
      request.on('error', (error) => {
        if ((error as NodeJS.ErrnoException).code !== 'ECONNRESET') reject(error);
      });
      request.end(body);
    });
    await waitFor(
      'the abandoned command to be killed',
      async () => {
        const listing = await exec('ps -o args | grep -v grep | grep -c "sleep 45" || true');
        return listing.stdout.trim() === '0' ? true : undefined;
      },
      20_000,
      250,
    );
  });
  // What a command prints reaches a streaming caller while it runs, in a session as one-shot:
  // the command waits for a file the test makes only once its first line has arrived, so output
  // held back until the end would stall it to its timeout.
  for (const session of [undefined, 'streamed']) {
    it(`streams output while the command runs (${session === undefined ? 'one-shot' : 'in a session'})`, async () => {
      const gate = `/tmp/go-${randomBytes(4).toString('hex')}`;
      const response = await fetch(execUrl(), {
        method: 'POST',
        headers: { ...daemon.auth, 'content-type': 'application/json' },
        body: JSON.stringify({
          command: `echo first; while [ ! -e ${gate} ]; do sleep 0.1; done; echo second`,
          timeoutMs: 20_000,
          ...(session === undefined ? {} : { session }),
        }),
      });
      expect(response.status).toBe(200);
      const reader = response.body!.getReader();
      const decoder = new TextDecoder();
      let text = '';
      let opened = false;
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        text += decoder.decode(value, { stream: true });
        if (!opened && text.includes('"data":"first\\n"')) {
          opened = true;
          expect((await exec(`touch ${gate}`)).status).toBe('ok');
        }
      }
      const events = text
        .split('\n')
        .filter((line) => line !== '')
        .map((line) => JSON.parse(line) as { type: string; result?: Record<string, unknown> });
      expect(opened).toBe(true);
      expect(events.at(-1)?.result).toMatchObject({ status: 'ok', exitCode: 0, stdout: 'first\nsecond\n' });
    }, 60_000);
  }
});
