/**
 * A terminal's output, kept within a fixed number of bytes and addressed by absolute offsets:
 * byte N of the program's output is byte N for every reader, whenever it reads. What passed out
 * of the window is gone, and a read from before it says how much it missed (`dropped`); the
 * window never grows, whatever the program prints and however slowly anyone reads.
 */
export interface RingRead {
  data: Buffer;
  /** The absolute offset of `data`'s first byte. */
  offset: number;
  /** Bytes between the offset asked for and `offset` that left the window. */
  dropped: number;
}

export class OutputRing {
  readonly capacityBytes: number;
  /** Copies of the chunks written, oldest first; together at most `capacityBytes`. */
  readonly #chunks: Buffer[] = [];
  #heldBytes = 0;
  #end = 0;

  constructor(capacityBytes: number) {
    if (!Number.isInteger(capacityBytes) || capacityBytes < 1)
      throw new RangeError('a ring holds at least one byte');
    this.capacityBytes = capacityBytes;
  }

  /** The offset of the first byte still held. */
  get start(): number {
    return this.#end - this.#heldBytes;
  }

  /** The offset one past the last byte written (every byte ever written, counted). */
  get end(): number {
    return this.#end;
  }

  get heldBytes(): number {
    return this.#heldBytes;
  }

  write(chunk: Uint8Array): void {
    if (chunk.length === 0) return;
    this.#end += chunk.length;
    // Copied: a stream's chunk may be a view of a much larger buffer that must not stay alive.
    const kept = Buffer.from(
      chunk.length > this.capacityBytes ? chunk.subarray(chunk.length - this.capacityBytes) : chunk,
    );
    this.#chunks.push(kept);
    this.#heldBytes += kept.length;
    while (this.#heldBytes > this.capacityBytes) {
      const first = this.#chunks[0] as Buffer;
      const excess = this.#heldBytes - this.capacityBytes;
      if (first.length <= excess) {
        this.#chunks.shift();
        this.#heldBytes -= first.length;
      } else {
        this.#chunks[0] = Buffer.from(first.subarray(excess));
        this.#heldBytes -= excess;
      }
    }
  }

  /** Up to `maxBytes` from `since` (default: the window's start), or from the window's start if `since` left it. */
  read(since: number | undefined, maxBytes: number): RingRead {
    const start = this.start;
    const asked = since ?? start;
    const from = Math.min(Math.max(asked, start), this.#end);
    const dropped = Math.max(0, start - asked);
    const wanted = Math.min(maxBytes, this.#end - from);
    if (wanted <= 0) return { data: Buffer.alloc(0), offset: from, dropped };
    const parts: Buffer[] = [];
    let position = start;
    let remaining = wanted;
    for (const chunk of this.#chunks) {
      const chunkEnd = position + chunk.length;
      if (chunkEnd > from && remaining > 0) {
        const begin = Math.max(0, from - position);
        const piece = chunk.subarray(begin, Math.min(chunk.length, begin + remaining));
        parts.push(piece);
        remaining -= piece.length;
      }
      position = chunkEnd;
      if (remaining === 0) break;
    }
    return { data: Buffer.concat(parts), offset: from, dropped };
  }
}
