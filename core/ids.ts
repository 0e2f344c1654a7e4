import { randomFillSync } from 'node:crypto';

/** Lower-case letters and digits only: valid in Docker names, Kubernetes names and file names. */
const ID_ALPHABET = 'abcdefghijklmnopqrstuvwxyz0123456789';
/** 16 characters of a 36-letter alphabet is about 82 bits: collisions are not a practical concern. */
const ID_RANDOM_LENGTH = 16;

export type IdPrefix = 'sbx' | 'pool' | 'ro' | 'daemon' | 'exec' | 'snp' | 'acc' | 'pty' | 'att';

/**
 * Random bytes drawn from the system's CSPRNG 4 KiB at a time: an id or a marker per command
 * (thousands a second under load) then costs a slice, not a call into the CSPRNG each. No byte is
 * handed out twice.
 */
const POOL_BYTES = 4096;
const pool = Buffer.alloc(POOL_BYTES);
let poolOffset = POOL_BYTES;

export function pooledRandomBytes(length: number): Buffer {
  if (length > POOL_BYTES) return randomFillSync(Buffer.alloc(length));
  if (poolOffset + length > POOL_BYTES) {
    randomFillSync(pool);
    poolOffset = 0;
  }
  const bytes = Buffer.from(pool.subarray(poolOffset, poolOffset + length));
  // Spent bytes are wiped, so a later view of the pool cannot show an id or marker handed out.
  pool.fill(0, poolOffset, poolOffset + length);
  poolOffset += length;
  return bytes;
}

export function createId(prefix: IdPrefix, length = ID_RANDOM_LENGTH): string {
  const bytes = pooledRandomBytes(length);
  let suffix = '';
  for (const byte of bytes) suffix += ID_ALPHABET[byte % ID_ALPHABET.length];
  return `${prefix}-${suffix}`;
}

/** The shape every sandbox id has; used to reject garbage before it reaches a provider. */
export const SANDBOX_ID_PATTERN = /^sbx-[a-z0-9]{8,32}$/;
