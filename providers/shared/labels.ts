/**
 * The facts every resource carries so a reaper can find it without the daemon's state: which
 * deployment (namespace), which daemon, which sandbox, which pool, when it was made and when it
 * must be gone. Timestamps are epoch milliseconds so the values are legal on every backend
 * (Kubernetes label values allow no colons). Only identity goes here: other facts (the image, the
 * spec) stay in the resource's own configuration, or where a backend has none, in a state file.
 */
import type { SandboxInfo } from '../../core/schemas/sandbox.ts';
import type { ListFilter } from '../sandbox-provider.ts';

export const SYSTEM_LABELS = {
  namespace: 'namespace',
  daemonId: 'daemon-id',
  sandboxId: 'sandbox-id',
  pool: 'pool',
  createdAt: 'created-at',
  leaseExpiresAt: 'lease-expires-at',
  deadlineAt: 'deadline-at',
} as const;

/** User labels live under their own sub-prefix so they can never overwrite ours. */
const USER_LABEL_INFIX = 'user.';

export interface SystemLabelValues {
  namespace: string;
  daemonId: string;
  sandboxId: string;
  pool: string | null;
  createdAtMs: number;
  leaseExpiresAtMs: number;
  deadlineAtMs: number;
}

export function encodeLabels(
  prefix: string,
  system: SystemLabelValues,
  userLabels: Record<string, string>,
): Record<string, string> {
  const labels: Record<string, string> = {
    [prefix + SYSTEM_LABELS.namespace]: system.namespace,
    [prefix + SYSTEM_LABELS.daemonId]: system.daemonId,
    [prefix + SYSTEM_LABELS.sandboxId]: system.sandboxId,
    [prefix + SYSTEM_LABELS.pool]: system.pool ?? '',
    [prefix + SYSTEM_LABELS.createdAt]: String(system.createdAtMs),
    [prefix + SYSTEM_LABELS.leaseExpiresAt]: String(system.leaseExpiresAtMs),
    [prefix + SYSTEM_LABELS.deadlineAt]: String(system.deadlineAtMs),
  };
  for (const [key, value] of Object.entries(userLabels)) labels[prefix + USER_LABEL_INFIX + key] = value;
  return labels;
}

export function userLabelKey(prefix: string, key: string): string {
  return prefix + USER_LABEL_INFIX + key;
}

/**
 * The labels a listing selects by (each `key=value` must match): this namespace, and what the
 * filter asks for. A backend turns them into its own query (Docker's label filters, a Kubernetes
 * label selector). A pool of `null` selects the sandboxes of no pool.
 */
export function selectorLabels(
  prefix: string,
  namespace: string,
  filter: ListFilter,
): Record<string, string> {
  const selector: Record<string, string> = { [prefix + SYSTEM_LABELS.namespace]: namespace };
  if (filter.daemonId !== undefined) selector[prefix + SYSTEM_LABELS.daemonId] = filter.daemonId;
  if (filter.pool !== undefined) selector[prefix + SYSTEM_LABELS.pool] = filter.pool ?? '';
  for (const [key, value] of Object.entries(filter.labels ?? {})) selector[userLabelKey(prefix, key)] = value;
  return selector;
}

/**
 * Whether a sandbox a provider read back (from its own records) is one a listing asks for: its
 * pool, its daemon and every label of the filter. For backends that cannot query by labels.
 */
export function matchesListFilter(info: SandboxInfo, filter: ListFilter): boolean {
  if (filter.pool !== undefined && info.pool !== filter.pool) return false;
  if (filter.daemonId !== undefined && info.daemonId !== filter.daemonId) return false;
  return hasUserLabels(info.labels, filter.labels);
}

/** Whether decoded user labels carry every label the filter asks for. */
export function hasUserLabels(labels: Record<string, string>, wanted: Record<string, string> = {}): boolean {
  return Object.entries(wanted).every(([key, value]) => labels[key] === value);
}

function isoFromMs(value: string | undefined): string {
  const ms = Number(value);
  return new Date(Number.isFinite(ms) ? ms : 0).toISOString();
}

/** Reads back what `encodeLabels` wrote; returns null for a resource that is not ours. */
export function decodeLabels(
  prefix: string,
  labels: Record<string, string>,
): Pick<
  SandboxInfo,
  'id' | 'labels' | 'namespace' | 'daemonId' | 'pool' | 'createdAt' | 'leaseExpiresAt' | 'deadlineAt'
> | null {
  const id = labels[prefix + SYSTEM_LABELS.sandboxId];
  const namespace = labels[prefix + SYSTEM_LABELS.namespace];
  if (id === undefined || namespace === undefined) return null;
  const userLabels: Record<string, string> = {};
  const userPrefix = prefix + USER_LABEL_INFIX;
  for (const [key, value] of Object.entries(labels)) {
    if (key.startsWith(userPrefix)) userLabels[key.slice(userPrefix.length)] = value;
  }
  const pool = labels[prefix + SYSTEM_LABELS.pool];
  return {
    id,
    namespace,
    labels: userLabels,
    daemonId: labels[prefix + SYSTEM_LABELS.daemonId] ?? '',
    pool: pool === undefined || pool === '' ? null : pool,
    createdAt: isoFromMs(labels[prefix + SYSTEM_LABELS.createdAt]),
    leaseExpiresAt: isoFromMs(labels[prefix + SYSTEM_LABELS.leaseExpiresAt]),
    deadlineAt: isoFromMs(labels[prefix + SYSTEM_LABELS.deadlineAt]),
  };
}
