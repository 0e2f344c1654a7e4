/**
 * The static relay for tests: `.tools/gym-relay` when it is at least as new as its source (what
 * scripts/setup.sh keeps so), else a copy compiled from the source into a temporary folder, so a
 * test never runs a relay older than the code it tests (a checkout whose `.tools` another one built).
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { DEFAULT_RELAY_HELPER_PATH } from '../providers/shared/gateway-relay.ts';

const SOURCE = fileURLToPath(new URL('../providers/shared/relay-helper/gym-relay.c', import.meta.url));

let compiled: string | undefined;

export function relayBinaryForTests(): string {
  if (
    existsSync(DEFAULT_RELAY_HELPER_PATH) &&
    statSync(DEFAULT_RELAY_HELPER_PATH).mtimeMs >= statSync(SOURCE).mtimeMs
  )
    return DEFAULT_RELAY_HELPER_PATH;
  if (compiled === undefined) {
    const path = join(mkdtempSync(join(tmpdir(), 'gym-relay-test-')), 'gym-relay');
    execFileSync('cc', ['-static', '-Os', '-Wall', '-o', path, SOURCE]);
    compiled = path;
  }
  return compiled;
}
