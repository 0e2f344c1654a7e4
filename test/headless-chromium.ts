/**
 * A real headless Chromium (Debian's `chromium`) driven over the Chrome DevTools Protocol with the
 * `ws` package, for the viewer's browser tests. Without chromium the tests skip, except when
 * GYM_REQUIRE_DOCKER=1 (CI sets it): then they fail, as the Docker tests do.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { WebSocket } from 'ws';
import { isDockerRequired } from './docker-available.ts';
import { waitFor } from './wait-for.ts';

/** Undefined when chromium is here; otherwise why the browser tests skip. Throws when CI requires it. */
export function chromiumSkipReason(): string | undefined {
  try {
    execFileSync('sh', ['-c', 'command -v chromium'], { stdio: 'ignore' });
    return undefined;
  } catch {
    const reason = 'chromium is not installed; scripts/setup.sh installs it';
    if (isDockerRequired) throw new Error(`GYM_REQUIRE_DOCKER=1 but ${reason}`);
    return reason;
  }
}

type Json = Record<string, unknown>;

/** One page's DevTools session. */
export class BrowserPage {
  private nextId = 1;
  private readonly pending = new Map<
    number,
    { resolve: (value: Json) => void; reject: (error: Error) => void }
  >();
  /** Uncaught exceptions and console errors the page reported. */
  readonly errors: string[] = [];

  private readonly socket: WebSocket;

  constructor(socket: WebSocket) {
    this.socket = socket;
    socket.on('message', (data) => {
      const message = JSON.parse(String(data)) as Json;
      if (typeof message.id === 'number') {
        const waiter = this.pending.get(message.id);
        this.pending.delete(message.id);
        if (message.error !== undefined) waiter?.reject(new Error(JSON.stringify(message.error)));
        else waiter?.resolve((message.result ?? {}) as Json);
      } else if (message.method === 'Runtime.exceptionThrown') {
        this.errors.push(JSON.stringify((message.params as Json).exceptionDetails));
      } else if (message.method === 'Runtime.consoleAPICalled' && (message.params as Json).type === 'error') {
        this.errors.push(JSON.stringify((message.params as Json).args));
      }
    });
  }

  send(method: string, params: Json = {}): Promise<Json> {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.socket.send(JSON.stringify({ id, method, params }));
    });
  }

  /** Evaluates an expression in the page and returns its value (awaited when a promise). */
  async evaluate<T>(expression: string): Promise<T> {
    const result = await this.send('Runtime.evaluate', {
      expression,
      returnByValue: true,
      awaitPromise: true,
    });
    if (result.exceptionDetails !== undefined)
      throw new Error(`page threw: ${JSON.stringify(result.exceptionDetails)}`);
    return (result.result as Json).value as T;
  }

  /** Waits until `expression` is truthy in the page. */
  waitUntil(what: string, expression: string, timeoutMs = 15_000): Promise<unknown> {
    return waitFor(what, async () => (await this.evaluate<unknown>(expression)) || undefined, timeoutMs, 50);
  }

  async navigate(url: string): Promise<void> {
    await this.send('Page.navigate', { url });
    await this.waitUntil(`${url} to load`, "document.readyState === 'complete'");
  }

  /** Types into the focused element as a keyboard would. */
  async type(text: string): Promise<void> {
    await this.send('Input.insertText', { text });
  }

  async pressKey(key: 'Enter' | 'Tab'): Promise<void> {
    const code = key === 'Enter' ? 13 : 9;
    const base = { key, code: key, windowsVirtualKeyCode: code, nativeVirtualKeyCode: code };
    await this.send('Input.dispatchKeyEvent', {
      type: 'keyDown',
      ...base,
      ...(key === 'Enter' ? { text: '\r' } : {}),
    });
    await this.send('Input.dispatchKeyEvent', { type: 'keyUp', ...base });
  }

  /** A PNG of the whole page, not only the viewport. */
  async screenshot(): Promise<Buffer> {
    const metrics = await this.send('Page.getLayoutMetrics');
    const size = metrics.cssContentSize as { width: number; height: number };
    const result = await this.send('Page.captureScreenshot', {
      format: 'png',
      captureBeyondViewport: true,
      clip: {
        x: 0,
        y: 0,
        width: Math.ceil(size.width),
        height: Math.min(Math.ceil(size.height), 6000),
        scale: 1,
      },
    });
    return Buffer.from(String(result.data), 'base64');
  }
}

export interface HeadlessChromium {
  page: BrowserPage;
  close(): Promise<void>;
}

export async function launchChromium(): Promise<HeadlessChromium> {
  const profile = await mkdtemp(join(tmpdir(), 'gym-chromium-'));
  const child: ChildProcess = spawn(
    'chromium',
    [
      '--headless',
      '--remote-debugging-port=0',
      `--user-data-dir=${profile}`,
      '--no-first-run',
      '--no-default-browser-check',
      '--disable-gpu',
      '--disable-extensions',
      '--disable-background-networking',
      '--disable-component-update',
      '--window-size=1280,900',
      // Chromium refuses to start its sandbox as root (CI containers); the page it loads is ours.
      ...(process.getuid?.() === 0 ? ['--no-sandbox'] : []),
      'about:blank',
    ],
    // Its own process group, so closing it ends its renderer and helper processes too.
    { stdio: ['ignore', 'ignore', 'pipe'], detached: true },
  );
  let stderr = '';
  const endpoint = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`chromium did not start: ${stderr}`)), 30_000);
    child.stderr!.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
      const match = /DevTools listening on (ws:\/\/\S+)/.exec(stderr);
      if (match !== null) {
        clearTimeout(timer);
        resolve(match[1]!);
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`chromium exited with ${code}: ${stderr}`));
    });
  });
  const port = new URL(endpoint).port;
  const targets = (await (await fetch(`http://127.0.0.1:${port}/json/list`)).json()) as Array<Json>;
  const target = targets.find((entry) => entry.type === 'page');
  if (target === undefined) throw new Error('chromium opened no page');
  const socket = new WebSocket(String(target.webSocketDebuggerUrl));
  await once(socket, 'open');
  const page = new BrowserPage(socket);
  await page.send('Page.enable');
  await page.send('Runtime.enable');
  await page.send('Emulation.setDeviceMetricsOverride', {
    width: 1280,
    height: 900,
    deviceScaleFactor: 1,
    mobile: false,
  });
  return {
    page,
    async close() {
      socket.close();
      if (child.exitCode === null && child.pid !== undefined) {
        const exited = once(child, 'exit');
        process.kill(-child.pid, 'SIGKILL');
        await exited;
      }
      await rm(profile, { recursive: true, force: true });
    },
  };
}
