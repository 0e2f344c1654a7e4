/**
 * Reads glibc's `/etc/ld.so.cache` (the `glibc-ld.so.cache1.1` layout every glibc since 2.32
 * writes, alone or after the old `ld.so-1.7.0` table): which file the dynamic loader loads for
 * each library name. The toolchain check compares the image's cache with the sandbox's, because
 * an honest `apt-get install` rewrites the cache (ldconfig runs) and only a cache that sends a
 * library the image already had somewhere else changes what the image's programs load.
 */

const NEW_MAGIC = 'glibc-ld.so.cache1.1';
/** magic (20) + nlibs, len_strings (4 + 4) + flags and padding (4) + extension offset (4) + unused (12). */
const NEW_HEADER_BYTES = 48;
/** flags (4) + key (4) + value (4) + osversion (4) + hwcap (8). */
const NEW_ENTRY_BYTES = 24;

/**
 * The cache's entries as `name/flags` (the library name and the loader's ABI flags, since one name
 * may appear for several ABIs) to the path the loader takes first. Null when the bytes are not a
 * cache of that layout.
 */
export function parseLdCache(bytes: Buffer): Map<string, string> | null {
  const start = bytes.indexOf(NEW_MAGIC, 0, 'latin1');
  if (start < 0 || start + NEW_HEADER_BYTES > bytes.length) return null;
  const count = bytes.readUInt32LE(start + 20);
  if (start + NEW_HEADER_BYTES + count * NEW_ENTRY_BYTES > bytes.length) return null;
  // Offsets of names are from the start of the new header.
  const text = (offset: number): string | null => {
    const at = start + offset;
    if (offset <= 0 || at >= bytes.length) return null;
    const end = bytes.indexOf(0, at);
    return bytes.toString('utf8', at, end < 0 ? bytes.length : end);
  };
  const entries = new Map<string, string>();
  for (let index = 0; index < count; index += 1) {
    const at = start + NEW_HEADER_BYTES + index * NEW_ENTRY_BYTES;
    const flags = bytes.readInt32LE(at);
    const name = text(bytes.readUInt32LE(at + 4));
    const path = text(bytes.readUInt32LE(at + 8));
    if (name === null || path === null) return null;
    const key = `${name}/${flags}`;
    // The loader takes the first entry it finds for a name: later ones never load.
    if (!entries.has(key)) entries.set(key, path);
  }
  return entries;
}
