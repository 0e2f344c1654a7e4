import { Readable } from 'node:stream';
import * as tar from 'tar-stream';

export interface ContractEntry {
  name: string;
  type: 'file' | 'directory' | 'symlink' | 'link' | 'character-device';
  content?: Buffer;
  linkname?: string;
  mode?: number;
}

/** Packs entries into a tar stream (a Node Readable). */
export function entriesToTar(entries: ContractEntry[]): Readable {
  const pack = tar.pack();
  for (const entry of entries) {
    const mode = entry.mode ?? (entry.type === 'directory' ? 0o755 : 0o644);
    if (entry.type === 'file')
      pack.entry({ name: entry.name, mode, type: 'file' }, entry.content ?? Buffer.alloc(0));
    else
      pack.entry({
        name: entry.name,
        mode,
        type: entry.type,
        linkname: entry.linkname ?? '',
        devmajor: 1,
        devminor: 3,
      });
  }
  pack.finalize();
  return Readable.from(pack as AsyncIterable<Buffer>, { objectMode: false });
}

/** Reads every entry of a tar stream into memory (for tests: small archives only). */
export async function tarToEntries(stream: Readable): Promise<ContractEntry[]> {
  const extract = tar.extract();
  stream.pipe(extract as unknown as NodeJS.WritableStream);
  const entries: ContractEntry[] = [];
  for await (const entry of extract) {
    const chunks: Buffer[] = [];
    for await (const chunk of entry) chunks.push(chunk as Buffer);
    const { header } = entry;
    entries.push({
      name: header.name,
      type: header.type as ContractEntry['type'],
      content: Buffer.concat(chunks),
      ...(header.linkname ? { linkname: header.linkname } : {}),
      mode: header.mode,
    });
  }
  return entries;
}
