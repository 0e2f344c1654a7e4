/**
 * Which resolved addresses the proxy may connect to. Checked on the address it actually connects
 * to (never re-resolved), so a name that answers a public address to the policy check and a
 * private one to the connect (DNS rebinding) gains nothing.
 */
import { BlockList, isIP } from 'node:net';
import { networkInterfaces } from 'node:os';

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
const FORBIDDEN_V6 = ['::/127', 'fc00::/7', 'fe80::/10', 'ff00::/8', '64:ff9b::/96', '2001:db8::/32'];

function blockListOf(ranges: readonly string[]): BlockList {
  const list = new BlockList();
  for (const range of ranges) {
    const [address, length] = range.split('/') as [string, string];
    list.addSubnet(address, Number(length), isIP(address) === 6 ? 'ipv6' : 'ipv4');
  }
  return list;
}

/** `::ffff:10.0.0.1` is 10.0.0.1 to the kernel: judge it as that. */
function unmapped(address: string): string {
  const match = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  return match === null ? address : match[1]!;
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
      ).map((address) => unmapped(address.toLowerCase())),
    );
  }

  /** The daemon's API port: refused on every local address, whatever the operator allows. */
  addSelfPort(port: number): void {
    this.#selfPorts.add(port);
  }

  /** Why the proxy may not connect to `address:port`, or null when it may. */
  refusal(rawAddress: string, port: number): string | null {
    const address = unmapped(rawAddress.toLowerCase());
    const family = isIP(address);
    if (family === 0) return `${rawAddress} is not an address`;
    const type = family === 4 ? 'ipv4' : 'ipv6';
    const isLocal = this.#ownAddresses.has(address) || this.#forbidden.check(address, type);
    if (
      isLocal &&
      this.#selfPorts.has(port) &&
      (this.#isLoopback(address) || this.#ownAddresses.has(address))
    ) {
      return `${address}:${port} is the daemon's own API`;
    }
    if (!isLocal || this.#allowed.check(address, type)) return null;
    return `${address} is a loopback, private, link-local, multicast or own address`;
  }

  #isLoopback(address: string): boolean {
    return address === '::1' || address.startsWith('127.') || address === '::' || address.startsWith('0.');
  }
}
