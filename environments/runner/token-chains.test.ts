import { describe, expect, it } from 'vitest';
import { buildChains, findContiguityBreak, projectChain, roundTo4, type TokenCall } from './token-chains.ts';

/** A call with one output message; logprobs made from the ids so each call's are told apart. */
function call(id: string, prompt: number[], generation: number[], completedAt = 0): TokenCall {
  return {
    callId: id,
    promptTokenIds: prompt,
    generationTokenIds: generation,
    generationLogProbs: generation.map((token) => -token / 1000),
    outputItems: [{ type: 'message', role: 'assistant', content: [{ type: 'output_text', text: id }] }],
    tokenItemIndex: 0,
    completedAt,
  };
}

// A tool-calling conversation: system+user, then tool output between the model's turns.
const first = call('c1', [1, 2, 3], [10, 11], 1);
const second = call('c2', [1, 2, 3, 10, 11, 4, 40], [12], 2);
const third = call('c3', [1, 2, 3, 10, 11, 4, 40, 12, 4, 41], [13, 14], 3);

describe('chains by token prefix', () => {
  it('joins an append-only rollout into one chain, tool output between turns as interstitials', () => {
    const build = buildChains([first, second, third]);
    expect(build.chains).toHaveLength(1);
    const [chain] = build.chains;
    expect(chain!.chainId).toBe('main');
    expect(chain!.links.map((link) => [link.call.callId, link.interstitial])).toEqual([
      ['c1', []],
      ['c2', [4, 40]],
      ['c3', [4, 41]],
    ]);
    expect(build.notes).toMatchObject({
      roots: 1,
      chains: 1,
      deliveredFraction: 1,
      generatedTokensCaptured: 5,
    });
    expect(build.quarantined).toEqual([]);
  });

  it('does not depend on the order the calls were recorded in', () => {
    const build = buildChains([third, first, second]);
    expect(build.chains[0]!.links.map((link) => link.call.callId)).toEqual(['c1', 'c2', 'c3']);
  });

  it('projects each turn with the whole sequence so far as its prompt: prompt ids 0, generated ids 1 with their logprobs', () => {
    const output = projectChain(buildChains([first, second, third]).chains[0]!);
    expect(output.map((item) => item.prompt_token_ids)).toEqual([
      [1, 2, 3],
      [1, 2, 3, 10, 11, 4, 40],
      [1, 2, 3, 10, 11, 4, 40, 12, 4, 41],
    ]);
    expect(output.map((item) => item.generation_token_ids)).toEqual([[10, 11], [12], [13, 14]]);
    expect(output[2]!.generation_log_probs).toEqual([-0.013, -0.014]);
    // The content is kept beside the tokens.
    expect(output[1]).toMatchObject({ type: 'message', content: [{ text: 'c2' }] });
    expect(findContiguityBreak(output)).toBeUndefined();
  });

  it('starts a new chain at a compacted prompt, delivers only the first-rooted one, and says how much it dropped', () => {
    // The agent replaced its history with a summary (ids 90, 91): the prompt extends no earlier call.
    const compacted = call('c4', [1, 2, 3, 90, 91], [15, 16, 17], 4);
    const build = buildChains([first, second, third, compacted]);
    expect(build.notes.roots).toBe(2);
    // Chains come in the order of their leaves by prompt length: c4's prompt is the shorter.
    expect(build.chains.map((chain) => [chain.chainId, chain.links.map((link) => link.call.callId)])).toEqual(
      [
        ['branch-0', ['c4']],
        ['main', ['c1', 'c2', 'c3']],
      ],
    );
    expect(build.notes.generatedTokensDelivered).toBe(5);
    expect(build.notes.deliveredFraction).toBe(0.625);
  });

  it('picks as main the chain whose root completed first, whatever its length', () => {
    const side = call('c0', [7, 7], [8], 0.5);
    const build = buildChains([first, second, third, side]);
    expect(build.chains.find((chain) => chain.chainId === 'main')!.links[0]!.call.callId).toBe('c0');
  });

  it('quarantines a call whose parent is ambiguous (two earlier calls with the very same ids)', () => {
    const twin = call('c1b', [1, 2, 3], [10, 11], 1.5);
    const build = buildChains([first, twin, second]);
    // c2 extends both c1 and c1b: quarantined; c1 and c1b are retries no kept call tells apart.
    expect(build.quarantined).toEqual(['c2', 'c1b']);
    expect(build.notes.unresolvedRetries).toEqual(['c1', 'c1b']);
    expect(build.chains).toEqual([]);
  });

  it('keeps the retry a later call extended and quarantines the other', () => {
    const abandoned = call('c2a', [1, 2, 3, 10, 11, 4, 40], [66], 2.5);
    const build = buildChains([first, second, abandoned, third]);
    expect(build.quarantined).toEqual(['c2a']);
    expect(build.notes.unresolvedRetries).toEqual([]);
    expect(build.chains.map((chain) => chain.links.map((link) => link.call.callId))).toEqual([
      ['c1', 'c2', 'c3'],
    ]);
  });

  it('calls a retry of the last call unresolved: the first by id is kept, the rollout cannot say which the agent kept', () => {
    const retry = call('c3r', third.promptTokenIds as number[], [77], 3.5);
    const build = buildChains([first, second, third, retry]);
    expect(build.notes.unresolvedRetries).toEqual(['c3', 'c3r']);
    expect(build.quarantined).toEqual(['c3r']);
    expect(build.chains).toHaveLength(1);
  });

  it('leaves a call that generated nothing out of the chains, counted', () => {
    const empty = call('c2e', [1, 2, 3, 10, 11, 4, 40], [], 2.2);
    const build = buildChains([first, empty, second, third]);
    expect(build.notes.emptyGenerationCalls).toEqual(['c2e']);
    expect(build.chains[0]!.links.map((link) => link.call.callId)).toEqual(['c1', 'c2', 'c3']);
  });

  it('gives a call with no content items a token-only message item', () => {
    const bare = { ...first, outputItems: [], tokenItemIndex: undefined };
    const [item] = projectChain(buildChains([bare]).chains[0]!);
    expect(item).toEqual({
      type: 'message',
      prompt_token_ids: [1, 2, 3],
      generation_token_ids: [10, 11],
      generation_log_probs: [-0.01, -0.011],
    });
  });
});

describe('the contiguity check', () => {
  it('finds an item whose prompt does not extend the ids before it', () => {
    const output = [
      { prompt_token_ids: [1, 2], generation_token_ids: [3] },
      { type: 'function_call' },
      { prompt_token_ids: [1, 2, 9], generation_token_ids: [4] },
    ];
    expect(findContiguityBreak(output)).toBe(2);
    expect(findContiguityBreak(output.slice(0, 2))).toBeUndefined();
  });
});

describe('rounding as Python rounds', () => {
  it('rounds exact ties to even and everything else to nearest', () => {
    expect(roundTo4(0.03125)).toBe(0.0312);
    expect(roundTo4(0.09375)).toBe(0.0938);
    expect(roundTo4(2 / 3)).toBe(0.6667);
    expect(roundTo4(1)).toBe(1);
  });
});
