import { describe, expect, it } from 'vitest';
import { DockerStreamDemuxer } from './demux.ts';

function frame(type: number, text: string): Buffer {
  const payload = Buffer.from(text);
  const header = Buffer.alloc(8);
  header[0] = type;
  header.writeUInt32BE(payload.length, 4);
  return Buffer.concat([header, payload]);
}

describe('DockerStreamDemuxer', () => {
  it('splits frames however the chunks fall', () => {
    const wire = Buffer.concat([frame(1, 'out one '), frame(2, 'err'), frame(1, 'out two'), frame(1, '')]);
    for (const chunkSize of [1, 3, 8, 9, wire.length]) {
      const seen = { stdout: '', stderr: '' };
      const demuxer = new DockerStreamDemuxer((stream, payload) => {
        seen[stream] += payload.toString();
      });
      for (let offset = 0; offset < wire.length; offset += chunkSize)
        demuxer.push(wire.subarray(offset, offset + chunkSize));
      expect(seen).toEqual({ stdout: 'out one out two', stderr: 'err' });
    }
  });
});
