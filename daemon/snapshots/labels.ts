/**
 * The `gym.` user labels are the daemon's (`LINEAGE_LABELS` of `core/schemas/snapshot.ts`: a fork
 * child's parent, snapshot and index): a caller who could set them could pass a sandbox off as
 * another's child, so every door that takes labels refuses them.
 */
import { GymError } from '../../core/errors.ts';

export const RESERVED_LABEL_PREFIX = 'gym.';

/** @throws GymError `VALIDATION_FAILED` naming the first label under `gym.`. */
export function requireUserLabels(labels: Readonly<Record<string, string>> | undefined, what: string): void {
  const reserved = Object.keys(labels ?? {}).filter((key) => key.startsWith(RESERVED_LABEL_PREFIX));
  if (reserved.length === 0) return;
  throw new GymError(
    'VALIDATION_FAILED',
    `invalid ${what}: labels: ${reserved.join(', ')}: the prefix ${RESERVED_LABEL_PREFIX} is reserved for the daemon's own labels`,
    {
      details: {
        issues: reserved.map((key) => ({ path: `labels.${key}`, message: 'reserved prefix gym.' })),
      },
    },
  );
}
