/**
 * Quoting for a POSIX shell, a fact every floor that writes a command line shares (providers
 * build kill scripts and tar pipelines with it, environments build test commands): it lives
 * here so neither has to reach into the other.
 */

/** Quotes one word for a POSIX shell: single quotes, with embedded single quotes spliced in. */
export function shellQuote(word: string): string {
  if (/^[A-Za-z0-9_./:=@%+-]+$/.test(word)) return word;
  return `'${word.replaceAll("'", `'\\''`)}'`;
}
