import { randomBytes } from 'node:crypto';

/** Lower-case letters and digits only: valid in Docker names, Kubernetes names and file names. */
const ID_ALPHABET = 'abcdefghijklmnopqrstuvwxyz0123456789';
/** 16 characters of a 36-letter alphabet is about 82 bits: collisions are not a practical concern. */
const ID_RANDOM_LENGTH = 16;

export type IdPrefix = 'sbx' | 'pool' | 'ro' | 'daemon' | 'exec';

export function createId(prefix: IdPrefix, length = ID_RANDOM_LENGTH): string {
  const bytes = randomBytes(length);
  let suffix = '';
  for (const byte of bytes) suffix += ID_ALPHABET[byte % ID_ALPHABET.length];
  return `${prefix}-${suffix}`;
}

/** The shape every sandbox id has; used to reject garbage before it reaches a provider. */
export const SANDBOX_ID_PATTERN = /^sbx-[a-z0-9]{8,32}$/;
