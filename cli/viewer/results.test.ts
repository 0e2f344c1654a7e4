import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { summarizeFailure, summarizeRollout, viewRollout } from './results.ts';

const nemoGymLines = readFileSync(
  new URL('../../environments/runner/fixtures/nemo-gym/mcqa-example-rollouts.jsonl', import.meta.url),
  'utf8',
)
  .split('\n')
  .filter((line) => line.trim() !== '')
  .map((line) => JSON.parse(line) as Record<string, unknown>);

describe('what the viewer shows of a line', () => {
  it("reads NeMo Gym's own lines (no _gym): reward, tokens from response.usage, its verifier fields, the prompt", () => {
    const line = nemoGymLines[0]!;
    const summary = summarizeRollout(line, 4);
    expect(summary).toMatchObject({
      position: 4,
      taskIndex: 4,
      rolloutIndex: 0,
      task: 'task 4',
      outcome: 'reward',
      reward: 1,
    });
    expect(summary.inputTokens).toBeGreaterThan(0);
    const view = viewRollout(line, 4);
    expect(view.verifier).toMatchObject({ expected_answer: 'C', extracted_answer: 'C' });
    expect(view.prompt[0]?.text).toContain('shortest year');
    expect(view.output).toContain('\\boxed{C}');
    expect(view.steps).toEqual([]);
  });

  it('reads lines of earlier versions, our fields at the top level', () => {
    const line = {
      id: 7,
      reward: 0,
      outcome: 'agent_error',
      response: { outcome: 'agent_error', submission: null, message: 'exited 1' },
      trajectory: [
        {
          index: 0,
          startedAt: '2026-01-01T00:00:00Z',
          durationMs: 5,
          action: { tool: 'bash', arguments: { command: 'ls' } },
        },
      ],
      timings: { totalMs: 12 },
    };
    expect(summarizeRollout(line, 0)).toMatchObject({
      task: '7',
      outcome: 'agent_error',
      steps: 1,
      totalMs: 12,
    });
    const view = viewRollout(line, 0);
    expect(view.harness).toEqual({ outcome: 'agent_error', submission: null, message: 'exited 1' });
    expect(view.steps[0]?.action).toEqual({ tool: 'bash', command: 'ls' });
    expect(view.startedAtMs).toBe(Date.parse('2026-01-01T00:00:00Z'));
  });

  it('takes tokens of each model call in the API shape it was made in', () => {
    const view = viewRollout(
      {
        _gym: {
          outcome: 'reward',
          model_calls: [
            {
              index: 0,
              api: 'messages',
              status: 'ok',
              usage: { input_tokens: 10, cache_read_input_tokens: 90, output_tokens: 5 },
            },
            {
              index: 1,
              api: 'chat.completions',
              status: 'error',
              error: { code: 'UPSTREAM', message: 'down' },
            },
          ],
        },
      },
      0,
    );
    expect(view.modelCalls[0]).toMatchObject({ inputTokens: 100, cachedTokens: 90, outputTokens: 5 });
    expect(view.modelCalls[1]).toMatchObject({ inputTokens: null, error: 'UPSTREAM: down' });
  });

  it('never throws on a line whose fields have the wrong types', () => {
    const damaged = {
      reward: 'high',
      _ng_task_index: 'x',
      _gym: {
        trajectory: [null, 3, { action: 'rm' }],
        model_calls: 'none',
        timings: { totalMs: 'soon' },
        usage: [],
      },
      responses_create_params: { input: [null, { role: 'user', content: [{ text: 'hi' }, 5] }] },
    };
    expect(summarizeRollout(damaged, 2)).toMatchObject({
      taskIndex: 2,
      reward: null,
      outcome: 'unknown',
      totalMs: null,
      steps: 3,
    });
    const view = viewRollout(damaged, 2);
    expect(view.steps.map((step) => step.action)).toEqual([null, null, null]);
    expect(view.modelCalls).toEqual([]);
    expect(view.prompt).toEqual([{ role: 'user', text: 'hi5' }]);
    expect(summarizeFailure({ error: { message: 'engine gone' } })).toMatchObject({
      failureClass: 'failure',
      message: 'engine gone',
    });
  });
});
