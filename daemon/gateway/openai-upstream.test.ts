import { describe, expect, it } from 'vitest';
import { assembleChat } from './openai-upstream.ts';

const chunk = (delta: Record<string, unknown>, finish: string | null = null) => ({
  choices: [{ index: 0, delta, finish_reason: finish }],
});

describe('assembleChat', () => {
  it('keeps streamed reasoning under the name it came by, beside the content', () => {
    // vLLM's reasoning parser streams the thinking first, then the answer.
    const assembled = assembleChat([
      chunk({ role: 'assistant', reasoning_content: 'The bug is ' }),
      chunk({ reasoning_content: 'an off-by-one.' }),
      chunk({ content: 'Fixed' }),
      chunk({ content: '.' }, 'stop'),
    ]);
    const [choice] = assembled.choices as Array<{ message: Record<string, unknown>; finish_reason: unknown }>;
    expect(choice!.message).toEqual({
      role: 'assistant',
      content: 'Fixed.',
      reasoning_content: 'The bug is an off-by-one.',
    });
    expect(choice!.finish_reason).toBe('stop');
  });

  it("takes newer vLLM's `reasoning` too, and adds no reasoning field when none came", () => {
    const withReasoning = assembleChat([chunk({ reasoning: 'think' }), chunk({ content: 'ok' }, 'stop')]);
    expect((withReasoning.choices as Array<{ message: Record<string, unknown> }>)[0]!.message.reasoning).toBe(
      'think',
    );
    const plain = assembleChat([chunk({ content: 'ok' }, 'stop')]);
    expect(
      Object.keys((plain.choices as Array<{ message: Record<string, unknown> }>)[0]!.message).sort(),
    ).toEqual(['content', 'role']);
  });

  it('puts tool-call fragments together with a null content', () => {
    const assembled = assembleChat([
      chunk({ tool_calls: [{ index: 0, id: 'c1', function: { name: 'ba', arguments: '{"cmd":' } }] }),
      chunk({ tool_calls: [{ index: 0, function: { name: 'sh', arguments: '"ls"}' } }] }, 'tool_calls'),
    ]);
    const message = (assembled.choices as Array<{ message: Record<string, unknown> }>)[0]!.message;
    expect(message.content).toBeNull();
    expect(message.tool_calls).toEqual([
      { id: 'c1', type: 'function', function: { name: 'bash', arguments: '{"cmd":"ls"}' } },
    ]);
  });
});
