/**
 * The terminal (PTY session) calls of the typed client: `client.ptys.create(sandboxId, ...)`,
 * and so on (docs/api.md, "Terminals"). Bytes travel as Buffers; the wire carries them base64.
 */
import type { IncomingMessage } from 'node:http';
import type { PtyAttachment, PtyCreateRequestInput, PtyInfo, PtyOutput } from '../core/schemas/pty.ts';

/** What the calls need of the client: one request, answered or thrown as the API error. */
export interface PtyTransport {
  raw(
    method: string,
    path: string,
    options?: { query?: Record<string, string | undefined>; json?: unknown },
  ): Promise<IncomingMessage>;
}

/** A read, its bytes decoded. */
export interface PtyChunk extends Omit<PtyOutput, 'data'> {
  data: Buffer;
}

async function json<T>(response: IncomingMessage): Promise<T> {
  const chunks: Buffer[] = [];
  for await (const chunk of response) chunks.push(chunk as Buffer);
  const text = Buffer.concat(chunks).toString('utf8');
  return (text === '' ? undefined : JSON.parse(text)) as T;
}

export class PtyClient {
  readonly #transport: PtyTransport;

  constructor(transport: PtyTransport) {
    this.#transport = transport;
  }

  #path(sandboxId: string, ptyId?: string, action?: string): string {
    const base = `/v1/sandboxes/${encodeURIComponent(sandboxId)}/ptys`;
    if (ptyId === undefined) return base;
    return `${base}/${encodeURIComponent(ptyId)}${action === undefined ? '' : `/${action}`}`;
  }

  async #call<T>(
    method: string,
    path: string,
    options: { query?: Record<string, string | undefined>; json?: unknown } = {},
  ): Promise<T> {
    return json<T>(await this.#transport.raw(method, path, options));
  }

  /** Opens a terminal (a command run by `sh -c`, or the shell) and holds it. */
  create(sandboxId: string, request: PtyCreateRequestInput = {}): Promise<PtyAttachment> {
    return this.#call('POST', this.#path(sandboxId), { json: request });
  }

  async list(sandboxId: string): Promise<PtyInfo[]> {
    return (await this.#call<{ ptys: PtyInfo[] }>('GET', this.#path(sandboxId))).ptys;
  }

  /** The terminal now; with `waitMs`, once it ended or that time passed. */
  get(sandboxId: string, ptyId: string, options: { waitMs?: number } = {}): Promise<PtyInfo> {
    return this.#call('GET', this.#path(sandboxId, ptyId), {
      query: { waitMs: options.waitMs === undefined ? undefined : String(options.waitMs) },
    });
  }

  /** Holds the terminal from here; `takeover` (default true) evicts the holder. */
  attach(sandboxId: string, ptyId: string, options: { takeover?: boolean } = {}): Promise<PtyAttachment> {
    return this.#call('POST', this.#path(sandboxId, ptyId, 'attach'), { json: options });
  }

  async detach(sandboxId: string, ptyId: string, attachment: string): Promise<void> {
    await this.#call('DELETE', this.#path(sandboxId, ptyId, 'attach'), { query: { attachment } });
  }

  /** Output from `since` (default: the oldest byte held), waiting up to `waitMs` for some. */
  async read(
    sandboxId: string,
    ptyId: string,
    options: {
      since?: number;
      waitMs?: number;
      maxBytes?: number;
      stream?: 'stdout' | 'stderr';
      attachment?: string;
    } = {},
  ): Promise<PtyChunk> {
    const query: Record<string, string | undefined> = {};
    for (const [key, value] of Object.entries(options)) if (value !== undefined) query[key] = String(value);
    const output = await this.#call<PtyOutput>('GET', this.#path(sandboxId, ptyId, 'output'), { query });
    return { ...output, data: Buffer.from(output.data, 'base64') };
  }

  async write(
    sandboxId: string,
    ptyId: string,
    data: Uint8Array | string,
    options: { attachment?: string } = {},
  ): Promise<void> {
    await this.#call('POST', this.#path(sandboxId, ptyId, 'input'), {
      json: { data: Buffer.from(data).toString('base64'), ...options },
    });
  }

  resize(
    sandboxId: string,
    ptyId: string,
    size: { rows: number; cols: number },
    options: { attachment?: string } = {},
  ): Promise<PtyInfo> {
    return this.#call('POST', this.#path(sandboxId, ptyId, 'resize'), { json: { ...size, ...options } });
  }

  /** Sends a signal (`SIGINT`, `TERM`, ...) to every process of the terminal. */
  signal(
    sandboxId: string,
    ptyId: string,
    signal: string,
    options: { attachment?: string } = {},
  ): Promise<PtyInfo> {
    return this.#call('POST', this.#path(sandboxId, ptyId, 'signal'), { json: { signal, ...options } });
  }

  /** Ends the terminal (every process of it killed). Idempotent. */
  async close(sandboxId: string, ptyId: string): Promise<void> {
    await this.#call('DELETE', this.#path(sandboxId, ptyId));
  }
}
