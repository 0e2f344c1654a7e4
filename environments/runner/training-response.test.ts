import { describe, expect, it } from 'vitest';
import { storedOutputText } from './rollout-line.ts';
import { buildTrainingCapture, outputItemsOf } from './training-response.ts';

/** A gateway record of a Chat Completions call whose upstream returned ids and logprobs. */
function record(index: number, prompt: number[], generation: number[], message: Record<string, unknown>) {
  return {
    index,
    rolloutId: 'ro-1',
    api: 'chat.completions',
    startedAt: new Date(Date.UTC(2026, 0, 1, 0, 0, index)).toISOString(),
    durationMs: 100,
    stream: false,
    request: {},
    status: 'ok',
    response: {
      object: 'chat.completion',
      choices: [{ index: 0, message: { role: 'assistant', ...message } }],
    },
    tokens: {
      promptTokenIds: prompt,
      completionTokenIds: generation,
      completionLogprobs: generation.map((_, position) => -0.1 * (position + 1)),
    },
  };
}

const toolCall = (id: string, command: string) => ({
  id,
  type: 'function',
  function: { name: 'bash', arguments: JSON.stringify({ command }) },
});

const first = record(0, [1, 2], [10, 11], { content: null, tool_calls: [toolCall('t1', 'ls')] });
const second = record(1, [1, 2, 10, 11, 4, 40], [12, 13], {
  content: 'Looking.',
  tool_calls: [toolCall('t2', 'cat a')],
});
const third = record(2, [1, 2, 10, 11, 4, 40, 12, 13, 4, 41], [14], { content: 'Done.' });

describe('the training response of a rollout', () => {
  it('rebuilds a multi-call tool-calling rollout as one contiguous sequence, unmasked', () => {
    const capture = buildTrainingCapture([first, second, third]);
    expect(capture.maskSample).toBe(false);
    expect(capture.metrics).toEqual({
      n_calls: 3,
      chains: 1,
      roots: 1,
      quarantined_calls: 0,
      quarantined_fraction: 0,
      delivered_fraction: 1,
      generated_tokens_captured: 5,
      generated_tokens_delivered: 5,
      empty_generation_calls: 0,
      lost_calls: [],
      mask_reasons: [],
    });
    const output = capture.output!;
    expect(output.map((item) => item.type)).toEqual(['function_call', 'message', 'function_call', 'message']);
    // The tokens ride on each call's last item: its tool call, or its text when it made none.
    const carriers = output.filter((item) => item.generation_token_ids !== undefined);
    expect(carriers.map((item) => item.type)).toEqual(['function_call', 'function_call', 'message']);
    expect(carriers[1]).toMatchObject({
      call_id: 't2',
      name: 'bash',
      prompt_token_ids: [1, 2, 10, 11, 4, 40],
      generation_token_ids: [12, 13],
      generation_log_probs: [-0.1, -0.2],
    });
    expect(carriers[2]).toMatchObject({ prompt_token_ids: [1, 2, 10, 11, 4, 40, 12, 13, 4, 41] });
  });

  it('masks a rollout whose upstream gave one call no ids, with the reason, and still shows what it had', () => {
    const missing = {
      ...record(1, [], [], {}),
      tokens: undefined,
      tokensMissing: 'the upstream returned no prompt_token_ids or token_ids (is it vLLM 0.10.2 or later?)',
    };
    const capture = buildTrainingCapture([first, missing, third]);
    expect(capture.maskSample).toBe(true);
    expect(capture.metrics.capture_incomplete).toBe(true);
    expect(capture.metrics.lost_calls).toEqual([
      { call: 1, reason: expect.stringContaining('no token ids: the upstream returned no prompt_token_ids') },
    ]);
    expect(capture.metrics.mask_reasons[0]).toMatch(/^call 1 lost its token ids/);
    // Why it is masked: the third call chains to the first, and the lost call's generated ids
    // (12, 13) would sit in its prompt, masked 0, as if the environment had written them.
    expect(capture.metrics.roots).toBe(1);
    expect(capture.output!.at(-1)!.prompt_token_ids).toEqual([1, 2, 10, 11, 4, 40, 12, 13, 4, 41]);
  });

  it('masks a rollout with a failed call, a damaged record, or calls the gateway never asked ids for', () => {
    const failed = {
      ...record(1, [], [], {}),
      status: 'error',
      tokens: undefined,
      error: { code: 'MODEL_UPSTREAM_ERROR' },
    };
    const damaged = {
      rolloutId: 'ro-1',
      status: 'error',
      usage: null,
      error: { code: 'RECORD_DAMAGED', message: 'x' },
    };
    const unasked = { ...record(3, [], [], {}), tokens: undefined };
    const capture = buildTrainingCapture([first, failed, damaged, second, third, unasked]);
    expect(capture.maskSample).toBe(true);
    expect(capture.metrics.lost_calls.map((lost) => lost.call)).toEqual([1, null, 3]);
    expect(capture.metrics.lost_calls[0]!.reason).toContain('MODEL_UPSTREAM_ERROR');
    expect(capture.metrics.lost_calls[2]!.reason).toContain('did not ask the upstream for token ids');
  });

  it('masks a call with ids but no logprobs rather than training without them', () => {
    const noLogprobs = { ...third, tokens: { ...third.tokens, completionLogprobs: undefined } };
    const capture = buildTrainingCapture([first, second, noLogprobs]);
    expect(capture.maskSample).toBe(true);
    expect(capture.metrics.lost_calls[0]!.reason).toContain('no logprob');
  });

  it('gives a compacting agent more than one chain, masked, delivering the first', () => {
    const compacted = record(3, [1, 2, 90, 91], [15, 16, 17], { content: 'Summary done.' });
    const capture = buildTrainingCapture([first, second, third, compacted]);
    expect(capture.metrics).toMatchObject({ roots: 2, chains: 2, delivered_fraction: 0.625 });
    expect(capture.maskSample).toBe(true);
    expect(capture.metrics.mask_reasons.join(' ')).toMatch(
      /2 chains; only the main one is delivered \(5 of 8/,
    );
    expect(capture.output!.filter((item) => item.generation_token_ids !== undefined)).toHaveLength(3);
  });

  it('has no training response for a rollout that recorded no ids at all', () => {
    const capture = buildTrainingCapture([], 'ROLLOUT_NOT_FOUND: no records');
    expect(capture.output).toBeUndefined();
    expect(capture.maskSample).toBe(true);
    expect(capture.metrics).toMatchObject({ n_calls: 0, capture_incomplete: true });
    expect(capture.metrics.error).toBe('no model call of the rollout recorded token ids');
  });

  it('leaves token counts asked of the upstream out: they generate nothing', () => {
    const count = { index: 3, api: 'messages.count_tokens', status: 'ok' };
    expect(buildTrainingCapture([first, second, third, count]).maskSample).toBe(false);
  });
});

describe('a call answer as Responses items', () => {
  it('keeps reasoning, text and each tool call in order', () => {
    const items = outputItemsOf(
      {
        choices: [
          {
            index: 0,
            message: { reasoning_content: 'think', content: 'hi', tool_calls: [toolCall('a', 'ls')] },
          },
        ],
      },
      'call-000001',
    );
    expect(items.map((item) => item.type)).toEqual(['reasoning', 'message', 'function_call']);
    expect(items[2]).toMatchObject({ call_id: 'a', arguments: '{"command":"ls"}' });
  });
});

describe('the final output of a line with a training response', () => {
  it('is the submission, not every turn the training response holds (reverify grades it)', () => {
    const output = buildTrainingCapture([first, second, third]).output!;
    const ours = {
      response: { object: 'response', output },
      _ng_token_capture: {},
      _gym: { harness: { submission: 'B' } },
    };
    expect(storedOutputText(ours)).toBe('B');
    // NeMo Gym's own line: its output's last message.
    expect(storedOutputText({ response: { object: 'response', output }, _ng_token_capture: {} })).toBe(
      'Done.',
    );
  });
});
