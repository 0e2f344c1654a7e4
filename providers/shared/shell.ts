import { shellQuote } from '../../core/shell-quote.ts';

export { shellQuote };

export function shellJoin(words: readonly string[]): string {
  return words.map(shellQuote).join(' ');
}

/**
 * Encodes bytes as a `printf` format string that reproduces them exactly, using only the
 * shell's builtin printf (no base64 or xxd needed in the image). Every byte outside a safe set
 * becomes a three-digit octal escape.
 */
export function printfFormatFor(bytes: Uint8Array): string {
  let format = '';
  for (const byte of bytes) {
    const isSafe =
      (byte >= 0x30 && byte <= 0x39) ||
      (byte >= 0x41 && byte <= 0x5a) ||
      (byte >= 0x61 && byte <= 0x7a) ||
      byte === 0x20;
    format += isSafe ? String.fromCharCode(byte) : `\\${byte.toString(8).padStart(3, '0')}`;
  }
  return `'${format}'`;
}
