/**
 * Splits Docker's multiplexed attach stream (no TTY) into stdout and stderr frames.
 * Each frame is an 8-byte header (stream type, three zero bytes, big-endian payload length)
 * followed by the payload. Frames may be split across chunks arbitrarily.
 */
export type FrameHandler = (stream: 'stdout' | 'stderr', payload: Buffer) => void;

const HEADER_BYTES = 8;

export class DockerStreamDemuxer {
  readonly #onFrame: FrameHandler;
  #pending: Buffer = Buffer.alloc(0);

  constructor(onFrame: FrameHandler) {
    this.#onFrame = onFrame;
  }

  push(chunk: Buffer): void {
    let buffer = this.#pending.length === 0 ? chunk : Buffer.concat([this.#pending, chunk]);
    while (buffer.length >= HEADER_BYTES) {
      const length = buffer.readUInt32BE(4);
      if (buffer.length < HEADER_BYTES + length) break;
      const type = buffer[0];
      const payload = buffer.subarray(HEADER_BYTES, HEADER_BYTES + length);
      // Type 0 is stdin echo (never sent without a TTY), 1 stdout, 2 stderr.
      if (type === 2) this.#onFrame('stderr', payload);
      else if (type === 1) this.#onFrame('stdout', payload);
      buffer = buffer.subarray(HEADER_BYTES + length);
    }
    this.#pending = buffer.length === 0 ? Buffer.alloc(0) : Buffer.from(buffer);
  }
}
