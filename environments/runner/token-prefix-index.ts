/**
 * A hash index of model calls by their ids (prompt then generation), to find the earlier call a
 * prompt continues in time linear in the prompt (`token-chains.ts`).
 */

/** One model call's training tokens (NeMo Gym's `TokenEntry`). */
export interface TokenCall {
  /**
   * The call's id. Ties are ordered by it as text, so ids whose text order is the calls' order
   * (zero-padded indices) give the order NeMo Gym gives the same ids.
   */
  callId: string;
  /** The ids the policy was conditioned on. */
  promptTokenIds: readonly number[];
  /** The ids it sampled. */
  generationTokenIds: readonly number[];
  /** The logprob of each sampled id (as many as there are ids). */
  generationLogProbs: readonly number[];
  /** The call's answer as Responses output items, without token fields. */
  outputItems: ReadonlyArray<Record<string, unknown>>;
  /** Which output item the tokens belong to; undefined when none (then the last, or a token-only item). */
  tokenItemIndex?: number;
  /** When the answer was complete, in seconds since the epoch (NeMo Gym's `created_at`). */
  completedAt: number;
}

/** What the index holds of a call: the call, and how many ids its prompt and generation hold. */
export interface IndexedCall {
  call: TokenCall;
  cumulativeLength: number;
}

/**
 * Whether `sequence` starts with a call's prompt then generation (read in place: a copy of
 * every call's whole sequence would cost as much again as the records).
 */
export function startsWithCall(sequence: readonly number[], call: TokenCall): boolean {
  const prompt = call.promptTokenIds;
  const generated = call.generationTokenIds;
  if (prompt.length + generated.length > sequence.length) return false;
  // The last id first: a call that is no prefix usually differs at its end.
  if (
    generated.length > 0 &&
    generated[generated.length - 1] !== sequence[prompt.length + generated.length - 1]
  )
    return false;
  for (let position = 0; position < prompt.length; position += 1)
    if (prompt[position] !== sequence[position]) return false;
  for (let position = 0; position < generated.length; position += 1)
    if (generated[position] !== sequence[prompt.length + position]) return false;
  return true;
}

/** Where a prompt's hashing ended, and the hashes of its prefixes of the lengths calls have. */
export interface PromptScan {
  /** The key of the whole prompt (equal prompts, equal keys). */
  key: string;
  /** The lanes after the prompt's last id, to hash a generation on from. */
  end: [number, number];
  /** `[length, lane one, lane two]` of each prefix whose length some earlier call's ids have, shortest first. */
  checkpoints: Array<[number, number, number]>;
}

/**
 * The calls so far by their cumulative ids (prompt then generation), to find a prompt's parent
 * in time linear in the prompt: each prompt is hashed once, and each of its prefixes of a length
 * some call has is looked up. Calls with the very same ids share a group (checked id by id when
 * added, so a hash collision never joins two sequences), and a match is checked id by id before
 * it is taken: a collision costs time, never a wrong parent. The hash mixes each id into two
 * 32-bit lanes with multipliers drawn per build, so ids cannot be chosen to collide.
 */
export class PrefixIndex<Node extends IndexedCall> {
  readonly #multipliers: [number, number];
  /** `length:lane1:lane2` to the groups of identical cumulative ids with that hash. */
  readonly #groups = new Map<string, Node[][]>();
  /** The lengths of the cumulative ids held: only prefixes of those lengths are looked up. */
  readonly #lengths = new Set<number>();

  constructor(random: () => number = Math.random) {
    // Odd multipliers: a multiplication by one is a bijection of the 32-bit lane.
    const odd = () => (Math.floor(random() * 0x7fff_ffff) * 2 + 1) | 0;
    this.#multipliers = [odd(), odd()];
  }

  /**
   * Hashes `ids` on from `start` (the lanes after the ids before them), calling `onPrefix` with
   * the lanes after each id; returns the lanes after the last.
   */
  #hash(
    ids: readonly number[],
    start: [number, number],
    onPrefix?: (length: number, laneOne: number, laneTwo: number) => void,
  ): [number, number] {
    let [laneOne, laneTwo] = start;
    const [multiplierOne, multiplierTwo] = this.#multipliers;
    for (let position = 0; position < ids.length; position += 1) {
      const id = ids[position]!;
      // Ids past 32 bits (none a tokeniser gives) fold their high part in.
      const low = id | 0;
      const high = (id / 4_294_967_296) | 0;
      laneOne =
        Math.imul((laneOne << 7) | (laneOne >>> 25), multiplierOne) ^ low ^ Math.imul(high, 0x27d4_eb2f);
      laneTwo = Math.imul(laneTwo ^ low, multiplierTwo) + high;
      laneTwo ^= laneTwo >>> 15;
      onPrefix?.(position + 1, laneOne, laneTwo);
    }
    return [laneOne, laneTwo];
  }

  /** Hashes a prompt, keeping the prefixes of the lengths earlier calls have. */
  scan(prompt: readonly number[]): PromptScan {
    const checkpoints: Array<[number, number, number]> = [];
    const end = this.#hash(prompt, [0x2545_f491, 0x6a09_e667], (length, laneOne, laneTwo) => {
      if (this.#lengths.has(length)) checkpoints.push([length, laneOne, laneTwo]);
    });
    return { key: `${prompt.length}:${end[0]}:${end[1]}`, end, checkpoints };
  }

  /** Adds a call, its prompt's scan given (its generation is hashed on from it). */
  add(node: Node, scan: PromptScan): void {
    const [laneOne, laneTwo] = this.#hash(node.call.generationTokenIds, scan.end);
    const length = node.cumulativeLength;
    const key = `${length}:${laneOne}:${laneTwo}`;
    const groups = this.#groups.get(key) ?? [];
    // The same length, so a prefix is the very same ids.
    const same = groups.find((group) => startsWithCall(cumulativeOf(node.call), group[0]!.call));
    if (same === undefined) groups.push([node]);
    else same.push(node);
    this.#groups.set(key, groups);
    this.#lengths.add(length);
  }

  /**
   * The earlier call whose cumulative ids are the longest prefix of `prompt` (the first added
   * of those ids), and whether another call has the very same ids (then the parent is ambiguous).
   */
  findParent(
    prompt: readonly number[],
    scan: PromptScan,
  ): { parent: Node | undefined; isAmbiguous: boolean } {
    for (let checkpoint = scan.checkpoints.length - 1; checkpoint >= 0; checkpoint -= 1) {
      const [length, laneOne, laneTwo] = scan.checkpoints[checkpoint]!;
      for (const group of this.#groups.get(`${length}:${laneOne}:${laneTwo}`) ?? [])
        if (startsWithCall(prompt, group[0]!.call))
          return { parent: group[0], isAmbiguous: group.length > 1 };
    }
    return { parent: undefined, isAmbiguous: false };
  }
}

/** A call's prompt then generation, as one sequence (a copy: only to check two calls' ids are the same). */
function cumulativeOf(call: TokenCall): number[] {
  return [...call.promptTokenIds, ...call.generationTokenIds];
}
