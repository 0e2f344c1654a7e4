/**
 * The facts every resource carries so a reaper can find it without the daemon's state: which
 * deployment (namespace), which daemon, which sandbox, which pool, when it was made and when it
 * must be gone. Timestamps are epoch milliseconds so the values are legal on every backend
 * (Kubernetes label values allow no colons). Only identity goes here: other facts (the image, the
 * spec) stay in the resource's own configuration, or where a backend has none, in a state file.
 */
import type { SandboxInfo } from '../../core/schemas/sandbox.ts';

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
