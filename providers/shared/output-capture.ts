/**
 * Keeps at most `maxBytes` of a stream: the first half and the last half, with the count of
 * what was dropped between them. Memory stays bounded whatever a command prints.
 */
export class OutputCapture {
  readonly #headLimit: number;
  readonly #tailLimit: number;
  readonly #head: Buffer[] = [];
  #headBytes = 0;
  /** A ring of the most recent bytes, allocated only once output outgrows the head. */
  #tail: Buffer | null = null;
  #tailStart = 0;
  #tailFilled = 0;
  #totalBytes = 0;

  constructor(maxBytes: number) {
    this.#headLimit = Math.ceil(maxBytes / 2);
    this.#tailLimit = Math.floor(maxBytes / 2);
  }

  get totalBytes(): number {
    return this.#totalBytes;
  }

  get isTruncated(): boolean {
    return this.#totalBytes > this.#headLimit + this.#tailLimit;
  }

  push(chunk: Buffer): void {
    this.#totalBytes += chunk.length;
    let rest = chunk;
    if (this.#headBytes < this.#headLimit) {
      const take = Math.min(this.#headLimit - this.#headBytes, rest.length);
      this.#head.push(Buffer.from(rest.subarray(0, take)));
      this.#headBytes += take;
      rest = rest.subarray(take);
    }
    if (rest.length === 0 || this.#tailLimit === 0) return;
    this.#tail ??= Buffer.alloc(this.#tailLimit);
    if (rest.length >= this.#tailLimit) {
      rest.copy(this.#tail, 0, rest.length - this.#tailLimit);
      this.#tailStart = 0;
      this.#tailFilled = this.#tailLimit;
      return;
    }
    for (let offset = 0; offset < rest.length; ) {
      const writeAt = (this.#tailStart + this.#tailFilled) % this.#tailLimit;
      const room = this.#tailFilled < this.#tailLimit ? this.#tailLimit - writeAt : this.#tailLimit - writeAt;
      const take = Math.min(room, rest.length - offset);
      rest.copy(this.#tail, writeAt, offset, offset + take);
      offset += take;
      const overflow = Math.max(0, this.#tailFilled + take - this.#tailLimit);
      this.#tailFilled = Math.min(this.#tailLimit, this.#tailFilled + take);
      this.#tailStart = (this.#tailStart + overflow) % this.#tailLimit;
    }
  }

  /** The kept bytes; when output was dropped, a marker saying how much stands between head and tail. */
  toBuffer(): Buffer {
    const head = Buffer.concat(this.#head);
    if (this.#tail === null || this.#tailFilled === 0) return head;
    const tail = Buffer.concat([
      this.#tail.subarray(this.#tailStart, Math.min(this.#tailLimit, this.#tailStart + this.#tailFilled)),
      this.#tail.subarray(0, Math.max(0, this.#tailStart + this.#tailFilled - this.#tailLimit)),
    ]);
    const dropped = this.#totalBytes - head.length - tail.length;
    if (dropped <= 0) return Buffer.concat([head, tail]);
    return Buffer.concat([head, Buffer.from(truncationMarker(dropped)), tail]);
  }

  toString(): string {
    return this.toBuffer().toString('utf8');
  }
}

export function truncationMarker(droppedBytes: number): string {
  return `\n[... ${droppedBytes} bytes truncated ...]\n`;
}
