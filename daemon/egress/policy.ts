/**
 * Allow-list entries and what they match: a target (host as the client named it, port) against a
 * sandbox's policy, and a policy against the operator's cap. Pure logic, no I/O.
 */
import { isIP } from 'node:net';
import { GymError } from '../../core/errors.ts';
import type { NetworkPolicy } from '../../core/schemas/sandbox.ts';
import type { EgressConfig } from './config.ts';

/** The ports an entry with no port opens: the web's. */
const DEFAULT_PORTS: readonly number[] = [80, 443];

/** One parsed entry: `suffix` true for `*.name` (names strictly under `name`). */
export interface HostEntry {
  name: string;
  suffix: boolean;
  /** null: any port. */
  ports: readonly number[] | null;
}

export function parseHostEntry(entry: string): HostEntry {
  let rest = entry.toLowerCase();
  let ports: readonly number[] | null = DEFAULT_PORTS;
  const bracketed = rest.startsWith('[');
  const colon = bracketed ? rest.indexOf(':', rest.indexOf(']')) : rest.lastIndexOf(':');
  if (colon !== -1) {
    const port = rest.slice(colon + 1);
    ports = port === '*' ? null : [Number(port)];
    rest = rest.slice(0, colon);
  }
  if (bracketed) rest = rest.slice(1, -1);
  const suffix = rest.startsWith('*.');
  return { name: suffix ? rest.slice(2) : rest, suffix, ports };
}

/** Lower case, no trailing dot, IPv6 without brackets: how targets and entries are compared. */
export function normalHost(host: string): string {
  const lower = host.toLowerCase().replace(/\.$/, '');
  return lower.startsWith('[') && lower.endsWith(']') ? lower.slice(1, -1) : lower;
}

function portCovered(port: number, ports: readonly number[] | null): boolean {
  return ports === null || ports.includes(port);
}

function nameCovered(host: string, entry: HostEntry): boolean {
  return entry.suffix ? host.endsWith(`.${entry.name}`) : host === entry.name;
}

/** Whether an entry opens `host:port` (host normalised; an IP literal matches only itself). */
export function entryMatches(entry: HostEntry, host: string, port: number): boolean {
  if (!portCovered(port, entry.ports)) return false;
  if (isIP(host) !== 0) return !entry.suffix && entry.name === host;
  return nameCovered(host, entry);
}

/** Why a target is refused by policy, or null when the policy opens it (addresses are checked after). */
export function policyRefusal(policy: NetworkPolicy, host: string, port: number): string | null {
  if (policy.mode === 'none') return 'the sandbox has no network (policy none)';
  if (policy.mode === 'public') return null;
  const target = normalHost(host);
  return policy.allowedHosts.some((entry) => entryMatches(parseHostEntry(entry), target, port))
    ? null
    : `${target}:${port} is not in the sandbox's allowed hosts`;
}

/** Whether the operator's entry covers everything the sandbox's entry would open. */
function entryCovers(cap: HostEntry, wanted: HostEntry): boolean {
  const capPorts = cap.ports;
  const portsCovered = capPorts === null || wanted.ports?.every((port) => capPorts.includes(port)) === true;
  if (!portsCovered) return false;
  if (!cap.suffix) return !wanted.suffix && wanted.name === cap.name;
  return wanted.name.endsWith(`.${cap.name}`) || (wanted.suffix && wanted.name === cap.name);
}

/**
 * Checks a policy against the operator's cap.
 * @throws GymError `FORBIDDEN_BY_CONFIG` naming what the configuration does not allow.
 */
export function requireWithinCap(
  policy: NetworkPolicy,
  config: Pick<EgressConfig, 'allowPublic' | 'allowedHosts'>,
): void {
  if (policy.mode === 'public' && !config.allowPublic) {
    throw new GymError(
      'FORBIDDEN_BY_CONFIG',
      'network mode public is not allowed by the daemon configuration (egress.allowPublic)',
      { details: { mode: 'public' } },
    );
  }
  if (policy.mode !== 'allowlist') return;
  const caps = config.allowedHosts.map(parseHostEntry);
  const refused = policy.allowedHosts.filter(
    (entry) => !caps.some((cap) => entryCovers(cap, parseHostEntry(entry))),
  );
  if (refused.length > 0) {
    throw new GymError(
      'FORBIDDEN_BY_CONFIG',
      `the daemon configuration (egress.allowedHosts) does not allow: ${refused.join(', ')}`,
      { details: { refused } },
    );
  }
}
