/**
 * Chains of model calls by their exact tokens, as NeMo Gym's token capture builds them
 * (`nemo_gym/token_id_capture/builder.py`, strategy `prefix_merging`), so a trainer gets the same
 * trajectory from our records as from NeMo Gym's own. Pure functions; nothing here does I/O.
 *
 * The semantics followed (our code, their rules):
 * - A call's parent is the earlier call whose prompt and generation together are the longest
 *   prefix of its prompt. Calls are taken by increasing prompt length (then by id), an order the
 *   tokens give whatever order the calls were recorded in: a parent's prompt is shorter.
 * - A call with no parent is a root: the first call, and any call whose history was rewritten
 *   (compacted, summarised, re-tokenised into other ids) or that starts another conversation.
 * - Two earlier calls with identical tokens are both candidates: the parent is ambiguous and the
 *   call is quarantined, with everything below it.
 * - Siblings with the same prompt are retries: the one a later call extended is kept, the others
 *   quarantined; when none was extended (a retry of the last call) the first by id is kept and
 *   the retries are unresolved (the rollout is masked: which answer the agent kept is unknown).
 * - A call that generated nothing has no training signal and stays out of the chains (counted).
 * - Each root-to-leaf path free of quarantined calls is a chain; the main chain is the one whose
 *   root call completed first (then by id), the only one delivered.
 */
import { PrefixIndex, type TokenCall } from './token-prefix-index.ts';

export type { TokenCall } from './token-prefix-index.ts';

export interface ChainLink {
  call: TokenCall;
  /** Prompt ids the call added after its parent's prompt and generation (tool output, a new user turn): masked 0. */
  interstitial: number[];
}

export interface Chain {
  /** `main`, or `branch-N` in the order chains were found. */
  chainId: string;
  rootPrompt: readonly number[];
  links: ChainLink[];
}

/** What a build kept and dropped (NeMo Gym's `BuildNotes`). */
export interface ChainNotes {
  roots: number;
  chains: number;
  generatedTokensCaptured: number;
  /** Generated ids of the main chain: the only chain delivered. */
  generatedTokensDelivered: number;
  /** Delivered over captured, rounded to 4 places as NeMo Gym rounds; 0 when nothing was captured. */
  deliveredFraction: number;
  /** Ids of retries no later call tells apart. */
  unresolvedRetries: string[];
  /** Ids of calls that generated nothing. */
  emptyGenerationCalls: string[];
}

export interface ChainBuild {
  chains: Chain[];
  /** Ids of quarantined calls (ambiguous parent, or a retry not kept). */
  quarantined: string[];
  notes: ChainNotes;
}

interface CallNode {
  call: TokenCall;
  /** A hash key of the prompt ids (equal prompts, equal keys). */
  promptKey: string;
  /** How many ids the prompt and generation hold together (a child's prompt starts with them all). */
  cumulativeLength: number;
  parent: CallNode | undefined;
  children: CallNode[];
  isQuarantined: boolean;
}

/** Orders as Python orders the same (length, id) tuples: ids compared as text. */
function byPromptThenId(left: TokenCall, right: TokenCall): number {
  const lengths = left.promptTokenIds.length - right.promptTokenIds.length;
  if (lengths !== 0) return lengths;
  return left.callId < right.callId ? -1 : left.callId > right.callId ? 1 : 0;
}

function isPrefixOf(prefix: readonly number[], sequence: readonly number[]): boolean {
  if (prefix.length > sequence.length) return false;
  // The last id first: a candidate that is no prefix usually differs at its end.
  if (prefix.length > 0 && prefix[prefix.length - 1] !== sequence[prefix.length - 1]) return false;
  for (let position = 0; position < prefix.length; position += 1)
    if (prefix[position] !== sequence[position]) return false;
  return true;
}

/**
 * Rounds to 4 decimal places as Python's `round(x, 4)` does: to the nearest, and an exact tie
 * (only odd multiples of 1/32 are exact ties at 4 places) to the even last digit.
 */
export function roundTo4(value: number): number {
  const thirtySeconds = value * 32;
  if (Number.isInteger(thirtySeconds) && thirtySeconds % 2 !== 0) {
    const low = Math.floor(value * 10_000);
    return (low % 2 === 0 ? low : low + 1) / 10_000;
  }
  return Number(value.toFixed(4));
}

/** Quarantines the retries among siblings (same parent, same prompt) that no later call kept. */
function resolveRetries(nodes: readonly CallNode[], quarantined: string[]): string[] {
  const unresolved: string[] = [];
  const roots = Symbol('roots');
  const byParent = new Map<CallNode | symbol, CallNode[]>();
  for (const node of nodes) {
    const key = node.parent ?? roots;
    const group = byParent.get(key);
    if (group === undefined) byParent.set(key, [node]);
    else group.push(node);
  }
  for (const siblings of byParent.values()) {
    // Siblings by their prompt ids: by key, then id by id (a shared key is not yet the same prompt).
    const byPrompt = new Map<string, CallNode[][]>();
    const groups: CallNode[][] = [];
    for (const node of siblings) {
      const key = node.promptKey;
      const candidates = byPrompt.get(key) ?? [];
      const prompt = node.call.promptTokenIds;
      const same = candidates.find(
        (group) =>
          group[0]!.call.promptTokenIds.length === prompt.length &&
          isPrefixOf(group[0]!.call.promptTokenIds, prompt),
      );
      if (same !== undefined) same.push(node);
      else {
        const group = [node];
        candidates.push(group);
        groups.push(group);
      }
      byPrompt.set(key, candidates);
    }
    for (const retries of groups) {
      if (retries.length < 2) continue;
      const extended = retries.filter((node) => node.children.some((child) => !child.isQuarantined));
      let kept: Set<CallNode>;
      if (extended.length > 0) kept = new Set(extended);
      else {
        const first = retries.reduce((best, node) => (node.call.callId < best.call.callId ? node : best));
        kept = new Set([first]);
        unresolved.push(...retries.map((node) => node.call.callId));
      }
      for (const node of retries)
        if (!kept.has(node) && !node.isQuarantined) {
          node.isQuarantined = true;
          quarantined.push(node.call.callId);
        }
    }
  }
  return unresolved;
}

/** Every root-to-leaf path with no quarantined call, as a chain (ids assigned later). */
function materialise(nodes: readonly CallNode[]): Chain[] {
  const chains: Chain[] = [];
  for (const leaf of nodes) {
    if (leaf.children.length > 0) continue;
    const path: CallNode[] = [];
    for (let node: CallNode | undefined = leaf; node !== undefined; node = node.parent) path.push(node);
    path.reverse();
    if (path.some((node) => node.isQuarantined)) continue;
    const root = path[0]!;
    const links: ChainLink[] = [];
    let previousLength = root.call.promptTokenIds.length;
    for (const [step, node] of path.entries()) {
      links.push({
        call: node.call,
        interstitial: step === 0 ? [] : node.call.promptTokenIds.slice(previousLength),
      });
      previousLength = node.cumulativeLength;
    }
    chains.push({ chainId: '', rootPrompt: root.call.promptTokenIds, links });
  }
  return chains;
}

/** The chains of a rollout's calls by token prefix (NeMo Gym's `prefix_merging`). */
export function buildChains(calls: readonly TokenCall[]): ChainBuild {
  const emptyGenerationCalls = calls
    .filter((call) => call.generationTokenIds.length === 0)
    .map((call) => call.callId);
  const kept = calls.filter((call) => call.generationTokenIds.length > 0);
  const notes: ChainNotes = {
    roots: 0,
    chains: 0,
    generatedTokensCaptured: 0,
    generatedTokensDelivered: 0,
    deliveredFraction: 0,
    unresolvedRetries: [],
    emptyGenerationCalls,
  };
  if (kept.length === 0) return { chains: [], quarantined: [], notes };

  const nodes: CallNode[] = [];
  const index = new PrefixIndex<CallNode>();
  const quarantined: string[] = [];
  let roots = 0;
  for (const call of [...kept].sort(byPromptThenId)) {
    const scan = index.scan(call.promptTokenIds);
    const node: CallNode = {
      call,
      promptKey: scan.key,
      cumulativeLength: call.promptTokenIds.length + call.generationTokenIds.length,
      parent: undefined,
      children: [],
      isQuarantined: false,
    };
    const { parent, isAmbiguous } = index.findParent(call.promptTokenIds, scan);
    if (parent === undefined) roots += 1;
    else {
      node.parent = parent;
      parent.children.push(node);
      if (isAmbiguous) {
        node.isQuarantined = true;
        quarantined.push(call.callId);
      }
    }
    nodes.push(node);
    index.add(node, scan);
  }
  const unresolvedRetries = resolveRetries(nodes, quarantined);
  const chains = materialise(nodes);

  let main: Chain | undefined;
  for (const chain of chains) {
    const root = chain.links[0]!.call;
    const best = main === undefined ? undefined : main.links[0]!.call;
    const isEarlier =
      best === undefined ||
      root.completedAt < best.completedAt ||
      (root.completedAt === best.completedAt && root.callId < best.callId);
    if (isEarlier) main = chain;
  }
  let branch = 0;
  for (const chain of chains) chain.chainId = chain === main ? 'main' : `branch-${branch++}`;

  const generated = (links: readonly ChainLink[]) =>
    links.reduce((sum, link) => sum + link.call.generationTokenIds.length, 0);
  const captured = kept.reduce((sum, call) => sum + call.generationTokenIds.length, 0);
  const delivered = main === undefined ? 0 : generated(main.links);
  return {
    chains,
    quarantined,
    notes: {
      ...notes,
      roots,
      chains: chains.length,
      generatedTokensCaptured: captured,
      generatedTokensDelivered: delivered,
      deliveredFraction: captured > 0 ? roundTo4(delivered / captured) : 0,
      unresolvedRetries,
    },
  };
}

/**
 * A chain as Responses output items whose token fields are contiguous: each call's items keep
 * their content, and the item that carries its tokens gets the whole sequence so far as
 * `prompt_token_ids` (earlier prompts, generations and interstitials: masked 0), its
 * `generation_token_ids` (masked 1) and their `generation_log_probs`. A call with no content
 * items gets a token-only message item.
 */
export function projectChain(chain: Chain): Array<Record<string, unknown>> {
  const items: Array<Record<string, unknown>> = [];
  let sequence: number[] = [...chain.rootPrompt];
  for (const [step, link] of chain.links.entries()) {
    if (step > 0) sequence = [...sequence, ...link.interstitial];
    const { call } = link;
    const tokenFields = {
      prompt_token_ids: [...sequence],
      generation_token_ids: [...call.generationTokenIds],
      generation_log_probs: [...call.generationLogProbs],
    };
    const content = call.outputItems.map((item) => ({ ...item }));
    if (content.length === 0) items.push({ type: 'message', ...tokenFields });
    else {
      const index = call.tokenItemIndex;
      const carrier =
        index !== undefined && index >= 0 && index < content.length ? index : content.length - 1;
      Object.assign(content[carrier]!, tokenFields);
      items.push(...content);
    }
    sequence = [...sequence, ...call.generationTokenIds];
  }
  return items;
}

/**
 * Whether every item with generated ids extends all ids before it (the prompt and every earlier
 * generation), as NeMo Gym's `assert_prefix_contiguity` requires; the first item that does not,
 * by its index, otherwise undefined.
 */
export function findContiguityBreak(output: ReadonlyArray<Record<string, unknown>>): number | undefined {
  let seen: number[] = [];
  for (const [index, item] of output.entries()) {
    const generated = item.generation_token_ids;
    if (!Array.isArray(generated)) continue;
    const prompt = Array.isArray(item.prompt_token_ids) ? (item.prompt_token_ids as number[]) : [];
    if (!isPrefixOf(seen, prompt)) return index;
    seen = [...prompt, ...(generated as number[])];
  }
  return undefined;
}
