/**
 * The gateway's open rollouts and their keys: a rollout is opened by the daemon token and gets a
 * key, handed out once, that its agent presents on every model call; a call is authorized by
 * that key alone. Each open rollout also remembers what its next calls are checked against:
 * the Responses ids it received (the only ones `previous_response_id` may name) and the tokens
 * of its latest calls (which the next call's prompt should extend).
 */
import { randomBytes } from 'node:crypto';
import { GymError } from '../../core/errors.ts';
import { createId } from '../../core/ids.ts';
import type { Logger } from '../../core/logger.ts';
import { ROLLOUT_ID_PATTERN } from '../../core/schemas/api.ts';
import { tokenMatches } from '../identity.ts';
import type { ModelCallRecord, UpstreamConfig } from './model-call.ts';
import { type CallTokens, findDrift } from './token-capture.ts';

/** An open rollout, as a model call that presented its key sees it. */
export interface OpenRollout {
  id: string;
  key: string;
  upstream: UpstreamConfig;
  /** The sandbox whose calls alone it takes, when it was opened for one (see `authorize`). */
  sandboxId?: string;
  calls: number;
  /** Bytes of records written so far (checked against the per-rollout budget). */
  recordedBytes: number;
  /** Bytes reserved by calls in flight (their requests, at least, will be recorded). */
  reservedBytes: number;
  /** Calls in flight now. */
  inFlight: number;
  /**
   * Ids of the Responses this rollout received, oldest first (at most
   * `MAX_RESPONSE_IDS_PER_ROLLOUT`): the only ones its `previous_response_id` may name.
   */
  responseIds: Set<string>;
  /**
   * The tokens of the rollout's latest calls that have them (at most
   * `RECENT_TOKEN_CALLS_PER_ROLLOUT`, oldest first), one of which the next call's prompt should extend.
   */
  recentTokens: Array<{ index: number; tokens: CallTokens }>;
}

/**
 * Calls whose tokens a rollout keeps to tell drift: an agent's next call continues one of its
 * latest few (side calls for a title or a summary come between); more would only hold more
 * token arrays in memory per open rollout.
 */
export const RECENT_TOKEN_CALLS_PER_ROLLOUT = 4;

/** Response ids a rollout remembers for `previous_response_id`; older ones drop out (an agent continues its latest). */
export const MAX_RESPONSE_IDS_PER_ROLLOUT = 1024;

/** Remembers a response id the upstream gave a rollout, forgetting the oldest past the bound. */
export function rememberResponse(rollout: OpenRollout, response: unknown): void {
  const id = (response as { id?: unknown } | undefined)?.id;
  if (typeof id !== 'string' || id === '') return;
  rollout.responseIds.delete(id);
  rollout.responseIds.add(id);
  if (rollout.responseIds.size > MAX_RESPONSE_IDS_PER_ROLLOUT) {
    const oldest = rollout.responseIds.values().next().value;
    if (oldest !== undefined) rollout.responseIds.delete(oldest);
  }
}

/**
 * The token fields of a call's record: its tokens, and a drift when its prompt extends none
 * of the rollout's recent calls with tokens (among which it then counts).
 */
export function rememberTokens(
  rollout: OpenRollout,
  index: number,
  found: CallTokens | { missing: string },
  logger: Logger,
): Pick<ModelCallRecord, 'tokens' | 'tokensMissing' | 'tokenDrift'> {
  if ('missing' in found) return { tokensMissing: found.missing };
  const drift = findDrift(rollout.recentTokens, found);
  if (drift !== undefined)
    logger.warn({ rolloutId: rollout.id, index, ...drift }, 'model call tokens drifted');
  rollout.recentTokens.push({ index, tokens: found });
  if (rollout.recentTokens.length > RECENT_TOKEN_CALLS_PER_ROLLOUT) rollout.recentTokens.shift();
  return { tokens: found, ...(drift === undefined ? {} : { tokenDrift: drift }) };
}

/** The open rollouts by id; what the gateway's open, authorize and close do to them. */
export class RolloutTable {
  readonly #rollouts = new Map<string, OpenRollout>();

  has(rolloutId: string): boolean {
    return this.#rollouts.has(rolloutId);
  }

  /**
   * Opens a rollout under `rolloutId` (a new id when none is given) and makes its key. A
   * rollout that is open already is a ROLLOUT_CONFLICT: a key is handed out once.
   * `recordedBytesOf` tells what the id recorded before (a reopened id appends to it).
   */
  async open(
    rolloutId: string | undefined,
    upstream: UpstreamConfig,
    recordedBytesOf: (rolloutId: string) => Promise<number>,
    sandboxId?: string,
  ): Promise<{ rolloutId: string; key: string; basePath: string }> {
    const id = rolloutId ?? createId('ro');
    if (!ROLLOUT_ID_PATTERN.test(id)) throw new GymError('VALIDATION_FAILED', `invalid rollout id "${id}"`);
    if (this.#rollouts.has(id)) {
      throw new GymError('ROLLOUT_CONFLICT', `rollout ${id} is already open; close it first`, {
        details: { rolloutId: id },
      });
    }
    const key = `gym-ro-${randomBytes(24).toString('base64url')}`;
    const recordedBytes = await recordedBytesOf(id);
    // Another open of the same id may have finished while this one waited.
    if (this.#rollouts.has(id))
      throw new GymError('ROLLOUT_CONFLICT', `rollout ${id} is already open; close it first`);
    this.#rollouts.set(id, {
      id,
      key,
      upstream,
      ...(sandboxId === undefined ? {} : { sandboxId }),
      calls: 0,
      recordedBytes,
      reservedBytes: 0,
      inFlight: 0,
      responseIds: new Set(),
      recentTokens: [],
    });
    return { rolloutId: id, key, basePath: `/v1/gateway/${id}/v1` };
  }

  /**
   * The rollout whose key this is; UNAUTHORIZED otherwise (an agent never sees the daemon's
   * token). An unknown rollout and a wrong key answer alike, so a model call cannot probe which
   * rollout ids exist. A rollout opened for a sandbox takes no call that `arrivedFrom` another
   * sandbox (the one whose reach it came through; undefined from outside every sandbox): the key
   * travels with a fork child's copy of its parent, the path a call took does not.
   */
  authorize(rolloutId: string, presentedKey: string, arrivedFrom?: string): OpenRollout {
    const rollout = this.#rollouts.get(rolloutId);
    // Compare even when there is no such rollout, so both answers take the same time.
    const isKeyRight = tokenMatches(presentedKey, rollout?.key ?? `gym-ro-none-${presentedKey}x`);
    const isElsewhere =
      rollout?.sandboxId !== undefined && arrivedFrom !== undefined && arrivedFrom !== rollout.sandboxId;
    if (rollout === undefined || !isKeyRight || isElsewhere)
      throw new GymError('UNAUTHORIZED', 'no open rollout with this id and key');
    return rollout;
  }

  /** Forgets a rollout: its key stops working at once. */
  close(rolloutId: string): void {
    this.#rollouts.delete(rolloutId);
  }
}
