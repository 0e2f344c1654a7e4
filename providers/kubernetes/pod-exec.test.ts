import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { PassThrough } from 'node:stream';
import { KubeConfig } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { type WebSocket, WebSocketServer } from 'ws';
import { exitCodeOf, startPodExec } from './pod-exec.ts';

describe('exit status of a pods/exec Status (v4+)', () => {
  it('reads Success as 0 and the ExitCode cause of NonZeroExitCode', () => {
    expect(exitCodeOf({ metadata: {}, status: 'Success' })).toBe(0);
    expect(
      exitCodeOf({
        status: 'Failure',
        reason: 'NonZeroExitCode',
        details: { causes: [{ reason: 'ExitCode', message: '137' }] },
      }),
    ).toBe(137);
  });

  it('gives no exit code for a failure that carries none (the runtime could not run the command)', () => {
    expect(
      exitCodeOf({ status: 'Failure', reason: 'InternalError', code: 500, message: 'error executing' }),
    ).toBeNull();
    expect(
      exitCodeOf({ status: 'Failure', details: { causes: [{ reason: 'ExitCode', message: 'x' }] } }),
    ).toBeNull();
  });
});

/** A pods/exec server on loopback speaking v5, `onConnection` playing the Pod's side, and a kubeconfig for it. */
async function fakeExecServer(onConnection: (ws: WebSocket) => void) {
  const http = createServer();
  const server = new WebSocketServer({ server: http, handleProtocols: () => 'v5.channel.k8s.io' });
  server.on('connection', onConnection);
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromOptions({
    clusters: [
      { name: 'c', server: `http://127.0.0.1:${(http.address() as AddressInfo).port}`, skipTLSVerify: true },
    ],
    users: [{ name: 'u', token: 't' }],
    contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
    currentContext: 'x',
  });
  return {
    kubeConfig,
    close: () => {
      server.close();
      http.close();
    },
  };
}

describe('the end of a pods/exec stream', () => {
  // Once on a real cluster an exec ended with exit 0 and 17.5 of its 20 MB of stdout: output the
  // server forwards after the status must not be lost.
  it('takes the output the server sends after the status, up to its close', async () => {
    const frame = (channel: number, text: string) =>
      Buffer.concat([Buffer.from([channel]), Buffer.from(text)]);
    const server = await fakeExecServer((ws) => {
      ws.send(frame(1, 'before '));
      ws.send(frame(3, JSON.stringify({ metadata: {}, status: 'Success' })));
      setTimeout(() => {
        ws.send(frame(1, 'after'));
        ws.close(1000);
      }, 50);
    });
    let stdout = '';
    try {
      const running = await startPodExec(
        server.kubeConfig,
        { namespace: 'n', pod: 'p', container: 'c' },
        ['x'],
        {
          onStdout: (chunk) => {
            stdout += chunk.toString();
          },
        },
      );
      expect(await running.done).toEqual({ kind: 'exited', exitCode: 0 });
      // Before, the end was told at the status and 'after' came too late for the result.
      expect(stdout).toBe('before after');
    } finally {
      server.close();
    }
  });
});

describe('stdin of a pods/exec stream', () => {
  // An agent can stop the command reading its stdin (SIGSTOP the gateway relay); client-node
  // reads stdin at once and queues it on the WebSocket, which never refuses a send.
  it('is read no faster than the server takes it, so the daemon queues a bounded amount', async () => {
    const http = createServer();
    const server = new WebSocketServer({ server: http, handleProtocols: () => 'v5.channel.k8s.io' });
    let serverSide: WebSocket | undefined;
    let received = 0;
    server.on('connection', (ws) => {
      serverSide = ws;
      // The command in the Pod does not read its stdin.
      ws.pause();
      ws.on('message', (data: Buffer) => {
        if (data[0] === 0) received += data.length - 1;
      });
    });
    await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
    const kubeConfig = new KubeConfig();
    kubeConfig.loadFromOptions({
      clusters: [
        {
          name: 'c',
          server: `http://127.0.0.1:${(http.address() as AddressInfo).port}`,
          skipTLSVerify: true,
        },
      ],
      users: [{ name: 'u', token: 't' }],
      contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
      currentContext: 'x',
    });
    const source = new PassThrough();
    const running = await startPodExec(kubeConfig, { namespace: 'n', pod: 'p', container: 'c' }, ['relay'], {
      stdin: source,
    });
    try {
      // Written as any well-behaved writer would: waiting for drain whenever the stream is full.
      const total = 64 * 1024 * 1024;
      const chunk = Buffer.alloc(64 * 1024, 7);
      let accepted = 0;
      const writer = (async () => {
        while (accepted < total) {
          accepted += chunk.length;
          if (!source.write(chunk)) await once(source, 'drain');
        }
      })();
      await new Promise((resolve) => setTimeout(resolve, 1000));
      // Before the fix all 64 MiB were taken at once and queued in the daemon's socket.
      expect(accepted).toBeLessThan(total / 2);
      (serverSide as WebSocket).resume();
      await writer;
      source.end();
      for (let i = 0; i < 500 && received < total; i += 1)
        await new Promise((resolve) => setTimeout(resolve, 10));
      expect(received).toBe(total);
    } finally {
      running.abandon();
      server.close();
      http.close();
    }
  });
});
