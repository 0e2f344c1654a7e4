/**
 * The spellings of one address. The kernel connects `::ffff:7f00:1` to 127.0.0.1 whatever way it
 * is written (URL parsing gives the hex form, a resolver may give the dotted one, a hand-written
 * target the expanded one), so the egress guard compares addresses in one canonical form and
 * judges an IPv6 address that carries an IPv4 one by both.
 */
import { isIP } from 'node:net';

/** `::1` and `::` in the canonical form below. */
export const LOOPBACK_V6 = '0:0:0:0:0:0:0:1';
export const UNSPECIFIED_V6 = '0:0:0:0:0:0:0:0';

/** The eight 16-bit groups of an IPv6 address (zone dropped), or null when it is not one. */
function groupsOf(address: string): number[] | null {
  const bare = address.replace(/%.*$/, '');
  if (isIP(bare) !== 6) return null;
  let text = bare;
  const tail: number[] = [];
  const dotted = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(text);
  if (dotted !== null) {
    const [a, b, c, d] = dotted.slice(1).map(Number) as [number, number, number, number];
    tail.push((a << 8) | b, (c << 8) | d);
    // `::ffff:` loses its last colon, `::` keeps both.
    text = text.slice(0, dotted.index);
    if (!text.endsWith('::')) text = text.slice(0, -1);
  }
  const parse = (part: string) =>
    part === '' ? [] : part.split(':').map((group) => Number.parseInt(group, 16));
  const gap = text.indexOf('::');
  let groups: number[];
  if (gap === -1) {
    groups = [...parse(text), ...tail];
  } else {
    const head = parse(text.slice(0, gap));
    const rest = [...parse(text.slice(gap + 2)), ...tail];
    groups = [...head, ...new Array<number>(8 - head.length - rest.length).fill(0), ...rest];
  }
  return groups.length === 8 &&
    groups.every((group) => Number.isInteger(group) && group >= 0 && group <= 0xffff)
    ? groups
    : null;
}

function ipv4Of(high: number, low: number): string {
  return `${high >> 8}.${high & 0xff}.${low >> 8}.${low & 0xff}`;
}

const zero = (groups: number[], from: number, to: number) =>
  groups.slice(from, to).every((group) => group === 0);

/**
 * The faces an address is judged by, each canonical (IPv4 dotted; IPv6 as eight groups in hex
 * without leading zeros, no `::`): one for a plain address; for IPv4-mapped (`::ffff:0:0/96`) the
 * IPv4 address alone, which is what the kernel connects to; for the other prefixes that embed one
 * (IPv4-translated `::ffff:0:0:0/96`, IPv4-compatible `::/96`, NAT64's `64:ff9b::/96`, 6to4's
 * `2002::/16`) both. Empty when it is not an address.
 */
export function addressFaces(address: string): string[] {
  const family = isIP(address);
  if (family === 4) return [address];
  const groups = groupsOf(address.toLowerCase());
  if (groups === null) return [];
  const canonical = groups.map((group) => group.toString(16)).join(':');
  if (zero(groups, 0, 5) && groups[5] === 0xffff) return [ipv4Of(groups[6]!, groups[7]!)];
  const embedded =
    (zero(groups, 0, 4) && groups[4] === 0xffff && groups[5] === 0) ||
    zero(groups, 0, 6) ||
    (groups[0] === 0x64 && groups[1] === 0xff9b && zero(groups, 2, 6))
      ? ipv4Of(groups[6]!, groups[7]!)
      : groups[0] === 0x2002
        ? ipv4Of(groups[1]!, groups[2]!)
        : undefined;
  return embedded === undefined ? [canonical] : [canonical, embedded];
}
