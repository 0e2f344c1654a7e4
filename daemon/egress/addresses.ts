/**
 * Which resolved addresses the proxy may connect to. Checked on the address it actually connects
 * to (never re-resolved), so a name that answers a public address to the policy check and a
 * private one to the connect (DNS rebinding) gains nothing.
 */
import { BlockList, isIP } from 'node:net';
import { networkInterfaces } from 'node:os';
import { addressFaces, LOOPBACK_V6, UNSPECIFIED_V6 } from './ipv6.ts';

/**
 * Ranges no sandbox reaches unless the operator names them: this host, its networks, the cloud
 * metadata service (link-local), multicast and what is not routable.
 */
const FORBIDDEN_V4 = [
  '0.0.0.0/8',
  '10.0.0.0/8',
  '100.64.0.0/10',
  '127.0.0.0/8',
  '169.254.0.0/16',
  '172.16.0.0/12',
  '192.0.0.0/24',
  '192.168.0.0/16',
  '198.18.0.0/15',
  '224.0.0.0/4',
  '240.0.0.0/4',
];
/**
 * `::/96` holds the unspecified and loopback addresses and the deprecated IPv4-compatible ones
 * (never routed); `64:ff9b:1::/48` is the local-use NAT64 prefix (RFC 8215), whose IPv4 part sits
 * where its operator chose; `2001::/32` is Teredo, a tunnel whose far end is an IPv4 address in
 * disguise. The other prefixes that embed an IPv4 address are judged by that address too
 * (`./ipv6.ts`).
 */
const FORBIDDEN_V6 = [
  '::/96',
  'fc00::/7',
  'fe80::/10',
  'ff00::/8',
  '64:ff9b::/96',
  '64:ff9b:1::/48',
  '2001::/32',
  '2001:db8::/32',
];

function blockListOf(ranges: readonly string[]): BlockList {
  const list = new BlockList();
  for (const range of ranges) {
    const [address, length] = range.split('/') as [string, string];
    list.addSubnet(address, Number(length), isIP(address) === 6 ? 'ipv6' : 'ipv4');
  }
  return list;
}

/** One spelling of an address the guard judges, with its family. */
interface Face {
  address: string;
  type: 'ipv4' | 'ipv6';
}

function facesOf(address: string): Face[] {
  return addressFaces(address).map((face) => ({ address: face, type: isIP(face) === 4 ? 'ipv4' : 'ipv6' }));
}

export class AddressGuard {
  readonly #forbidden = blockListOf([...FORBIDDEN_V4, ...FORBIDDEN_V6]);
  readonly #allowed: BlockList;
  readonly #ownAddresses: ReadonlySet<string>;
  readonly #selfPorts = new Set<number>();

  /**
   * @param allowPrivate the operator's `egress.allowPrivateAddresses`.
   * @param ownAddresses this host's interface addresses (default: read now); always refused unless allowed.
   */
  constructor(allowPrivate: readonly string[], ownAddresses?: readonly string[]) {
    this.#allowed = blockListOf(allowPrivate);
    this.#ownAddresses = new Set(
      (
        ownAddresses ??
        Object.values(networkInterfaces()).flatMap((list) => (list ?? []).map((i) => i.address))
      ).flatMap(addressFaces),
    );
  }

  /** The daemon's API port: refused on every local address, whatever the operator allows. */
  addSelfPort(port: number): void {
    this.#selfPorts.add(port);
  }

  /**
   * Why the proxy may not connect to `address:port`, or null when it may. An address that embeds
   * an IPv4 address (`::ffff:7f00:1`, `0:0:0:0:0:ffff:127.0.0.1`, `64:ff9b::7f00:1`, ...) is
   * judged by every face it has: refused when any of them is.
   */
  refusal(rawAddress: string, port: number): string | null {
    const faces = facesOf(rawAddress);
    if (faces.length === 0) return `${rawAddress} is not an address`;
    const local = faces.filter(
      (face) => this.#ownAddresses.has(face.address) || this.#forbidden.check(face.address, face.type),
    );
    const own = local.find((face) => this.#isLoopback(face.address) || this.#ownAddresses.has(face.address));
    if (own !== undefined && this.#selfPorts.has(port)) {
      return `${own.address}:${port} is the daemon's own API`;
    }
    const refused = local.find((face) => !this.#allowed.check(face.address, face.type));
    if (refused === undefined) return null;
    return `${refused.address} is a loopback, private, link-local, multicast or own address`;
  }

  #isLoopback(address: string): boolean {
    return (
      address === LOOPBACK_V6 ||
      address === UNSPECIFIED_V6 ||
      address.startsWith('127.') ||
      address.startsWith('0.')
    );
  }
}
