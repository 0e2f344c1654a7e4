/**
 * The trajectory exports against the schemas as published (trajectory-schemas.ts), and the round
 * trip: export, write, read back, parse, and every field the schema carries compared with the
 * rollout line it came from.
 */
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli } from '../../cli/program.ts';
import { silentLogger } from '../../core/logger.ts';
import { ModelScriptSchema } from '../../harnesses/scripted-model/script.ts';
import { startScriptedModelServer } from '../../harnesses/scripted-model/server.ts';
import type { ProviderContext } from '../../providers/sandbox-provider.ts';
import { startTestDaemon } from '../../test/daemon-harness.ts';
import { MemoryProvider } from '../../test/fixtures/memory-provider.ts';
import { readJsonl } from './files.ts';
import { toAtif, toNgTrajectory, trajectoryPaths } from './trajectory-export.ts';
import { atifTrajectorySchema, ngTrajectorySchema } from './trajectory-schemas.ts';

type Json = Record<string, unknown>;

/** A gateway record of a Chat Completions call, as the daemon writes one. */
function chatRecord(index: number, text: string, usage: Json, extra: Json = {}): Json {
  return {
    index,
    rolloutId: 'rollout-7',
    api: 'chat.completions',
    startedAt: `2026-12-01T10:00:0${index}.000Z`,
    durationMs: 250 + index,
    stream: false,
    request: { model: 'policy', messages: [{ role: 'user', content: `turn ${index}` }] },
    upstreamModel: 'qwen3-8b',
    status: 'ok',
    response: {
      id: `chatcmpl-${index}`,
      model: 'qwen3-8b',
      choices: [{ index: 0, finish_reason: 'stop', message: { role: 'assistant', content: text } }],
      usage,
    },
    usage,
    ...extra,
  };
}

/** The exact tokens of a call, in the shape the gateway records them (`tokens` of a record). */
const tokensOfCall = {
  promptTokenIds: [151644, 872, 198, 3838],
  completionTokenIds: [73, 1263, 13],
  completionLogprobs: [-0.25, -0.01, -1.5],
};

/** One of our rollout lines: two shell steps, their model calls (one with token ids), a verdict. */
function ourLine(): Json {
  return {
    responses_create_params: {
      input: [{ role: 'user', content: 'Fix the failing test in /repo.', type: 'message' }],
      instructions: 'You are a careful engineer.',
    },
    instance_id: 'astropy__astropy-12907',
    agent_ref: { type: 'responses_api_agents', name: 'mini-swe' },
    _ng_task_index: 3,
    _ng_rollout_index: 1,
    _ng_attempt_index: 0,
    _ng_rollout_id: 'rollout-7',
    resolved: true,
    response: { object: 'response', model: 'qwen3-8b', output: [] },
    reward: 1,
    _gym: {
      outcome: 'resolved',
      verifier: { FAIL_TO_PASS: { passed: ['test_a'], failed: [] }, logTail: 'all passed' },
      harness: { outcome: 'submitted', submission: 'diff --git a/x b/x', message: null },
      trajectory: [
        {
          index: 0,
          startedAt: '2026-12-01T10:00:00.000Z',
          durationMs: 1200,
          assistant: 'Let me look at the test.',
          action: { tool: 'bash', arguments: { command: 'cat tests/test_x.py' } },
          observation: 'def test_a(): assert f() == 2',
          exitCode: 0,
          usage: { inputTokens: 120, outputTokens: 12 },
        },
        {
          index: 1,
          startedAt: '2026-12-01T10:00:01.500Z',
          durationMs: 900,
          assistant: 'Now fix it.',
          action: { tool: 'bash', arguments: { command: 'sed -i s/1/2/ x.py && pytest' } },
          observation: 'exit status 1\nFAILED',
          exitCode: 1,
          usage: { inputTokens: 150, outputTokens: 3 },
        },
      ],
      model_calls: [
        chatRecord(0, 'Let me look at the test.', {
          prompt_tokens: 120,
          completion_tokens: 12,
          prompt_tokens_details: { cached_tokens: 100 },
        }),
        chatRecord(1, 'Now fix it.', { prompt_tokens: 150, completion_tokens: 3 }, { tokens: tokensOfCall }),
      ],
      usage: {
        input_tokens: 270,
        output_tokens: 15,
        cached_tokens: 100,
        calls: 2,
        calls_without_usage: 0,
        cost_usd: 0.0042,
      },
      timings: { sandboxMs: 800, agentMs: 2300, verifyMs: 4100, totalMs: 7300 },
      sandbox: { image: 'swebench/astropy:latest' },
    },
  };
}

describe('ng_trajectory export', () => {
  it('validates against the schema and carries the messages, commands, outputs, calls, tokens and timings', () => {
    const line = ourLine();
    const record = toNgTrajectory(line);
    // Through JSON and back, as a reader of the file gets it.
    const read = ngTrajectorySchema.parse(JSON.parse(JSON.stringify(record)));
    expect(read).toEqual(record);
    expect(read).toMatchObject({
      schema_version: '1.0',
      task_id: 'astropy__astropy-12907',
      rollout_id: 'rollout-7',
    });

    const [invocation] = read.invocations!;
    expect(invocation).toMatchObject({ status: 'completed', duration_ms: 2300 });
    const conversation = invocation!.conversation as Json[];
    expect(conversation.map((item) => [item.type, item.role ?? item.name ?? item.call_id])).toEqual([
      ['message', 'system'],
      ['message', 'user'],
      ['message', 'assistant'],
      ['function_call', 'bash'],
      ['function_call_output', 'call_0'],
      ['message', 'assistant'],
      ['function_call', 'bash'],
      ['function_call_output', 'call_1'],
    ]);
    const steps = (line._gym as Json).trajectory as Json[];
    expect(JSON.parse(conversation[3]!.arguments as string)).toEqual((steps[0]!.action as Json).arguments);
    expect(conversation[4]!.output).toBe(steps[0]!.observation);
    expect((conversation[5]!.content as Json[])[0]!.text).toBe('Now fix it.');
    // The sampled tokens ride on the item the call produced (the action), all three together.
    expect(conversation[6]).toMatchObject({
      prompt_token_ids: tokensOfCall.promptTokenIds,
      generation_token_ids: tokensOfCall.completionTokenIds,
      generation_log_probs: tokensOfCall.completionLogprobs,
    });
    expect(conversation[3]!.prompt_token_ids).toBeUndefined();

    expect(read.model_calls!.map((call) => call.token_stats)).toEqual([
      {
        prompt_tokens: 120,
        completion_tokens: 12,
        total_tokens: 132,
        cached_tokens: 100,
        reasoning_tokens: null,
      },
      {
        prompt_tokens: 150,
        completion_tokens: 3,
        total_tokens: 153,
        cached_tokens: 0,
        reasoning_tokens: null,
      },
    ]);
    expect(read.model_calls![1]).toMatchObject({
      model_call_id: 'rollout-7/call-1',
      duration_ms: 251,
      started_at: Date.parse('2026-12-01T10:00:01.000Z') / 1000,
      response_metadata: {
        model: 'qwen3-8b',
        dialect: 'chat.completions',
        finish_reason: 'stop',
        response_status: 'ok',
      },
    });
    expect(read.turns!.map((turn) => [turn.turn_no, turn.answer, turn.resolved, turn.model_calls])).toEqual([
      [1, 'Let me look at the test.', null, [{ model_call_id: 'rollout-7/call-0' }]],
      [2, 'Now fix it.', true, [{ model_call_id: 'rollout-7/call-1' }]],
    ]);
    expect(read.tool_calls![1]).toMatchObject({
      tool_call_id: 'call_1',
      tool_name: 'bash',
      duration_ms: 900,
      started_at: Date.parse('2026-12-01T10:00:01.500Z') / 1000,
      completed_at: Date.parse('2026-12-01T10:00:02.400Z') / 1000,
      output: 'exit status 1\nFAILED',
      status: 'completed',
    });
    expect(read.gaps).toEqual([]);
  });

  it('says so when steps and calls cannot be joined, and when a call has ids but no logprobs', () => {
    const line = ourLine();
    const gym = line._gym as Json;
    gym.model_calls = [
      chatRecord(
        0,
        'a',
        { prompt_tokens: 1, completion_tokens: 1 },
        { tokens: { promptTokenIds: [1], completionTokenIds: [2] } },
      ),
    ];
    const record = toNgTrajectory(line);
    expect(record.gaps!.map((gap) => gap.code)).toEqual([
      'model_call_step_join_unavailable',
      'generation_log_probs_unavailable',
    ]);
    const items = record.invocations![0]!.conversation as Json[];
    expect(items.some((item) => item.prompt_token_ids !== undefined)).toBe(false);
    // The steps keep the tokens their harness counted; no call is claimed for them.
    const agent = toAtif(line).steps.filter((step) => step.source === 'agent');
    expect(agent.map((step) => [step.metrics, step.llm_call_count])).toEqual([
      [{ prompt_tokens: 120, completion_tokens: 12 }, undefined],
      [{ prompt_tokens: 150, completion_tokens: 3 }, undefined],
    ]);
  });

  it("carries the gateway's re-tokenisation flag: a gap in ng_trajectory, the step's extra in ATIF", () => {
    const line = ourLine();
    const drift = { previousIndex: 0, expectedPrefixTokens: 140, matchingTokens: 97 };
    ((line._gym as Json).model_calls as Json[])[1]!.tokenDrift = drift;
    expect(toNgTrajectory(line).gaps).toEqual([
      {
        code: 'token_ids_retokenized',
        invocation_id: 'rollout-7/agent',
        detail: `rollout-7/call-1: ${JSON.stringify(drift)}`,
      },
    ]);
    const agent = toAtif(line).steps.filter((step) => step.source === 'agent');
    expect(agent[0]!.extra).toEqual({ model_call_id: 'rollout-7/call-0' });
    expect(agent[1]!.extra).toEqual({ model_call_id: 'rollout-7/call-1', token_drift: drift });
  });

  it("of an agent CLI (no steps): the gateway's answers are the turns, with their tokens", () => {
    const line = ourLine();
    const gym = line._gym as Json;
    gym.trajectory = [];
    const record = toNgTrajectory(line);
    const answers = (record.invocations![0]!.conversation as Json[]).filter(
      (item) => item.role === 'assistant',
    );
    expect(answers.map((item) => (item.content as Json[])[0]!.text)).toEqual([
      'Let me look at the test.',
      'Now fix it.',
    ]);
    expect(answers[1]!.generation_token_ids).toEqual(tokensOfCall.completionTokenIds);
    expect(record.turns).toHaveLength(2);
  });

  it("of an agent CLI: its commands and their outputs from the gateway's records (Messages and Chat shapes)", () => {
    const line = ourLine();
    const gym = line._gym as Json;
    gym.trajectory = [];
    const usage = { input_tokens: 40, output_tokens: 9, cache_read_input_tokens: 30 };
    gym.model_calls = [
      {
        index: 0,
        api: 'messages',
        startedAt: '2026-12-01T10:00:00.000Z',
        durationMs: 300,
        status: 'ok',
        request: { messages: [{ role: 'user', content: 'Fix it.' }] },
        response: {
          model: 'claude-x',
          stop_reason: 'tool_use',
          content: [
            { type: 'text', text: 'Running the tests.' },
            { type: 'tool_use', id: 'toolu_1', name: 'Bash', input: { command: 'pytest -q' } },
          ],
        },
        usage,
        tokens: tokensOfCall,
      },
      {
        index: 1,
        api: 'messages',
        startedAt: '2026-12-01T10:00:02.000Z',
        durationMs: 200,
        status: 'ok',
        request: {
          messages: [
            { role: 'user', content: 'Fix it.' },
            { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'Bash', input: {} }] },
            { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: '1 failed' }] },
          ],
        },
        response: { model: 'claude-x', stop_reason: 'end_turn', content: [{ type: 'text', text: 'Done.' }] },
        usage,
      },
      chatRecord(2, '', { prompt_tokens: 5, completion_tokens: 1 }),
    ];
    const chat = (gym.model_calls as Json[])[2]!;
    ((chat.response as Json).choices as Json[])[0]!.message = {
      role: 'assistant',
      content: null,
      tool_calls: [
        { id: 'call_9', type: 'function', function: { name: 'shell', arguments: '{"cmd":"ls"}' } },
      ],
    };
    const record = toNgTrajectory(line);
    const items = (record.invocations![0]!.conversation as Json[]).slice(2);
    expect(
      items.map((item) => [item.type, item.name ?? item.call_id ?? (item.content as Json[])[0]!.text]),
    ).toEqual([
      ['message', 'Running the tests.'],
      ['function_call', 'Bash'],
      ['function_call_output', 'toolu_1'],
      ['message', 'Done.'],
      ['function_call', 'shell'],
    ]);
    expect(items[1]).toMatchObject({
      arguments: '{"command":"pytest -q"}',
      generation_token_ids: tokensOfCall.completionTokenIds,
    });
    expect(items[2]!.output).toBe('1 failed');
    expect(record.tool_calls!.map((call) => [call.tool_call_id, call.status, call.output])).toEqual([
      ['toolu_1', 'completed', '1 failed'],
      ['call_9', 'unknown', null],
    ]);
    // Messages' input_tokens leave out cache reads: the prompt is all of them.
    expect(record.model_calls![0]!.token_stats).toMatchObject({ prompt_tokens: 70, cached_tokens: 30 });
    const atif = toAtif(line);
    const agent = atif.steps.filter((step) => step.source === 'agent');
    expect(
      agent.map((step) => [step.message, step.tool_calls?.map((call) => call.function_name) ?? []]),
    ).toEqual([
      ['Running the tests.', ['Bash']],
      ['Done.', []],
      ['', ['shell']],
    ]);
    expect(agent[0]!.observation).toEqual({ results: [{ source_call_id: 'toolu_1', content: '1 failed' }] });
    expect(agent[0]!.metrics).toMatchObject({
      prompt_tokens: 70,
      completion_token_ids: tokensOfCall.completionTokenIds,
    });
    expect(agent[2]!.tool_calls![0]!.arguments).toEqual({ cmd: 'ls' });
  });

  it("takes NeMo Gym's own ng_trajectory as it is, and makes one of its response items without it", async () => {
    const nemo = {
      _ng_task_index: 2,
      _ng_rollout_index: 3,
      reward: 0,
      ng_trajectory: {
        task_id: '2',
        rollout_id: '2-3',
        invocations: [
          {
            invocation_id: 'root',
            status: 'completed',
            conversation: [{ type: 'function_call_output', call_id: 'tool-1', output: 'result' }],
          },
        ],
        tool_calls: [{ invocation_id: 'root', tool_call_id: 'tool-1', started_at: 10.2, completed_at: 10.4 }],
      },
    };
    expect(toNgTrajectory(nemo)).toEqual(nemo.ng_trajectory);
    const lines = await readJsonl(join(import.meta.dirname, 'fixtures/nemo-gym/mcqa-example-rollouts.jsonl'));
    for (const fixture of lines) {
      const record = toNgTrajectory(fixture);
      const items = record.invocations![0]!.conversation as Json[];
      expect(items[0]).toMatchObject({ role: 'user' });
      expect(items.at(-1)).toEqual((fixture.response as { output: Json[] }).output.at(-1));
      const atif = toAtif(fixture);
      expect(atif.steps.map((step) => step.source)).toEqual(['user', 'agent']);
    }
  });
});

describe("NeMo Gym's training lines", () => {
  it('carry their reasoning, tool calls and token ids into ATIF steps', () => {
    const training = {
      prompt_token_ids: [1, 2, 3],
      generation_token_ids: [4, 5],
      generation_log_probs: [-0.5, -0.25],
    };
    const line = {
      _ng_task_index: 0,
      _ng_rollout_index: 0,
      responses_create_params: { input: [{ role: 'user', content: 'What is 6*7?', type: 'message' }] },
      response: {
        object: 'response',
        model: 'policy',
        status: 'completed',
        output: [
          { type: 'reasoning', id: 'rs_1', summary: [{ type: 'summary_text', text: 'Use the tool.' }] },
          { type: 'function_call', call_id: 'c1', name: 'calc', arguments: '{"expr":"6*7"}', ...training },
          { type: 'function_call_output', call_id: 'c1', output: '42' },
          {
            type: 'message',
            id: 'msg_2',
            role: 'assistant',
            status: 'completed',
            content: [{ type: 'output_text', text: '42', annotations: [] }],
            ...training,
          },
        ],
      },
      reward: 1,
    };
    const ng = toNgTrajectory(line);
    expect(ng.invocations![0]!.conversation).toHaveLength(5);
    const atif = toAtif(line);
    expect(atif.steps.map((step) => [step.source, step.message, step.reasoning_content])).toEqual([
      ['user', 'What is 6*7?', undefined],
      ['agent', '', 'Use the tool.'],
      ['agent', '42', undefined],
    ]);
    expect(atif.steps[1]).toMatchObject({
      tool_calls: [{ tool_call_id: 'c1', function_name: 'calc', arguments: { expr: '6*7' } }],
      observation: { results: [{ source_call_id: 'c1', content: '42' }] },
      metrics: { prompt_token_ids: [1, 2, 3], completion_token_ids: [4, 5], logprobs: [-0.5, -0.25] },
    });
    expect(atif.steps[2]!.metrics).toMatchObject({ completion_token_ids: [4, 5] });
    expect(atif.extra).toMatchObject({ reward: 1 });
  });
});

describe('ATIF export', () => {
  it('validates against ATIF-v1.7 and carries every field it can hold', () => {
    const line = ourLine();
    const trajectory = toAtif(line);
    const read = atifTrajectorySchema.parse(JSON.parse(JSON.stringify(trajectory)));
    expect(read).toEqual(trajectory);
    expect(read).toMatchObject({
      schema_version: 'ATIF-v1.7',
      session_id: 'rollout-7',
      agent: { name: 'mini-swe', model_name: 'qwen3-8b' },
    });
    expect(read.steps.map((step) => [step.step_id, step.source])).toEqual([
      [1, 'system'],
      [2, 'user'],
      [3, 'agent'],
      [4, 'agent'],
    ]);
    const [, user, first, second] = read.steps;
    expect(user!.message).toBe('Fix the failing test in /repo.');
    expect(first).toMatchObject({
      message: 'Let me look at the test.',
      timestamp: '2026-12-01T10:00:00.000Z',
      model_name: 'qwen3-8b',
      llm_call_count: 1,
      tool_calls: [
        { tool_call_id: 'call_0', function_name: 'bash', arguments: { command: 'cat tests/test_x.py' } },
      ],
      observation: { results: [{ source_call_id: 'call_0', content: 'def test_a(): assert f() == 2' }] },
      metrics: { prompt_tokens: 120, completion_tokens: 12, cached_tokens: 100 },
    });
    expect(second!.metrics).toEqual({
      prompt_tokens: 150,
      completion_tokens: 3,
      cached_tokens: 0,
      prompt_token_ids: tokensOfCall.promptTokenIds,
      completion_token_ids: tokensOfCall.completionTokenIds,
      logprobs: tokensOfCall.completionLogprobs,
    });
    expect(second!.tool_calls![0]!.extra).toMatchObject({ duration_ms: 900, status: 'completed' });
    const gym = line._gym as Json;
    expect(read.final_metrics).toMatchObject({
      total_prompt_tokens: 270,
      total_completion_tokens: 15,
      total_cached_tokens: 100,
      total_cost_usd: 0.0042,
      total_steps: 4,
    });
    expect(read.extra).toMatchObject({
      reward: 1,
      outcome: 'resolved',
      verifier: gym.verifier,
      timings: gym.timings,
      harness: gym.harness,
    });
  });
});

describe('the schema checks refuse what the specifications refuse', () => {
  const valid = () => JSON.parse(JSON.stringify(toAtif(ourLine()))) as Json;
  it('ATIF: unknown fields, step ids out of order, agent fields on a user step, a dangling source_call_id', () => {
    expect(atifTrajectorySchema.safeParse(valid()).success).toBe(true);
    const unknownField = valid();
    unknownField.surprise = 1;
    expect(atifTrajectorySchema.safeParse(unknownField).success).toBe(false);
    const reordered = valid();
    (reordered.steps as Json[])[2]!.step_id = 7;
    expect(atifTrajectorySchema.safeParse(reordered).success).toBe(false);
    const userMetrics = valid();
    (userMetrics.steps as Json[])[1]!.metrics = { prompt_tokens: 1 };
    expect(atifTrajectorySchema.safeParse(userMetrics).success).toBe(false);
    const dangling = valid();
    ((dangling.steps as Json[])[2]!.observation as { results: Json[] }).results[0]!.source_call_id = 'nope';
    expect(atifTrajectorySchema.safeParse(dangling).success).toBe(false);
    const noAgent = valid();
    delete noAgent.agent;
    expect(atifTrajectorySchema.safeParse(noAgent).success).toBe(false);
    const badTime = valid();
    (badTime.steps as Json[])[2]!.timestamp = 'yesterday';
    expect(atifTrajectorySchema.safeParse(badTime).success).toBe(false);
  });

  it('ng_trajectory: unknown fields, partial token metadata, a turn of another rollout, a duplicate call id', () => {
    const valid = () => JSON.parse(JSON.stringify(toNgTrajectory(ourLine()))) as Json;
    expect(ngTrajectorySchema.safeParse(valid()).success).toBe(true);
    const unknownField = valid();
    unknownField.extra = {};
    expect(ngTrajectorySchema.safeParse(unknownField).success).toBe(false);
    const partial = valid();
    const items = (partial.invocations as Json[])[0]!.conversation as Json[];
    delete items[6]!.generation_log_probs;
    expect(ngTrajectorySchema.safeParse(partial).success).toBe(false);
    const otherTurn = valid();
    (otherTurn.turns as Json[])[0]!.rollout_id = 'elsewhere';
    expect(ngTrajectorySchema.safeParse(otherTurn).success).toBe(false);
    const duplicate = valid();
    const calls = duplicate.model_calls as Json[];
    calls[1]!.model_call_id = calls[0]!.model_call_id;
    expect(ngTrajectorySchema.safeParse(duplicate).success).toBe(false);
    const negative = valid();
    ((negative.model_calls as Json[])[0]!.token_stats as Json).prompt_tokens = -1;
    expect(ngTrajectorySchema.safeParse(negative).success).toBe(false);
  });
});

describe('gym eval export', () => {
  let directory: string;
  beforeAll(async () => {
    directory = await mkdtemp(join(tmpdir(), 'gym-export-'));
  });
  afterAll(() => rm(directory, { recursive: true, force: true }));

  it('writes both files, one trajectory a rollout, that read back to what the lines hold', async () => {
    const results = join(directory, 'results.jsonl');
    const nemo = (
      await readJsonl(join(import.meta.dirname, 'fixtures/nemo-gym/mcqa-example-rollouts.jsonl'))
    )[0]!;
    const lines = [ourLine(), nemo];
    await writeFile(results, lines.map((line) => `${JSON.stringify(line)}\n`).join(''));
    const stdout = new PassThrough();
    let said = '';
    stdout.on('data', (chunk) => {
      said += String(chunk);
    });
    const streams = { stdout, stderr: new PassThrough(), logger: silentLogger, env: {} };
    expect(await runCli(['eval', 'export', results, '--format', 'both'], streams)).toBe(0);
    const paths = trajectoryPaths(results);
    expect(said).toContain(`ng 2 trajectories to ${paths.ng}`);
    const ng = (await readFile(paths.ng, 'utf8'))
      .trim()
      .split('\n')
      .map((text) => ngTrajectorySchema.parse(JSON.parse(text)));
    const atif = (await readFile(paths.atif, 'utf8'))
      .trim()
      .split('\n')
      .map((text) => atifTrajectorySchema.parse(JSON.parse(text)));
    expect(ng).toEqual(lines.map(toNgTrajectory));
    expect(atif).toEqual(lines.map(toAtif));
    expect(atif[1]!.steps[1]!.message).toBe(
      (nemo.response as { output: Array<{ content: Array<{ text: string }> }> }).output[0]!.content[0]!.text,
    );

    // A line no schema can hold fails the export, naming the problem, and writes nothing.
    const broken = join(directory, 'broken.jsonl');
    await writeFile(broken, `${JSON.stringify({ ng_trajectory: { task_id: 1 } })}\n`);
    const stderr = new PassThrough();
    let complained = '';
    stderr.on('data', (chunk) => {
      complained += String(chunk);
    });
    expect(await runCli(['eval', 'export', broken, '--format', 'ng'], { ...streams, stderr })).not.toBe(0);
    expect(complained).toContain('ng_trajectory does not match its schema');
    await expect(readFile(trajectoryPaths(broken).ng)).rejects.toThrow();

    // --output-dir: the same files, named after the rollouts, in a folder made for them.
    const elsewhere = join(directory, 'out', 'nested');
    expect(
      await runCli(['eval', 'export', results, '--format', 'atif', '--output-dir', elsewhere], streams),
    ).toBe(0);
    expect(await readFile(join(elsewhere, 'results_atif.jsonl'), 'utf8')).toBe(
      await readFile(paths.atif, 'utf8'),
    );
  });
});

describe('gym eval run --trajectories both', () => {
  it("writes each rollout's trajectories beside the results, from the gateway's records", async () => {
    const daemon = await startTestDaemon(
      { providers: [{ name: 'memory' }] },
      {
        factories: { memory: (_options: unknown, context: ProviderContext) => new MemoryProvider(context) },
        listen: true,
      },
    );
    const model = await startScriptedModelServer(
      ModelScriptSchema.parse({
        model: 'scripted',
        conversations: [{ replies: [{ content: 'Answer: B' }] }],
      }),
    );
    const directory = await mkdtemp(join(tmpdir(), 'gym-run-trajectories-'));
    try {
      const output = join(directory, 'rollouts.jsonl');
      const args = ['eval', 'run', '--env', 'mcqa', '--limit', '1', '-o', output, '--trajectories', 'both'];
      const policy = ['--model-url', model.baseUrl, '--model', 'scripted', '--env-yaml', '/dev/null'];
      const streams = { stdout: new PassThrough(), stderr: new PassThrough(), logger: silentLogger, env: {} };
      expect(await runCli([...args, ...policy, '--state-dir', daemon.stateDir], streams)).toBe(0);
      const [line] = await readJsonl(output);
      const paths = trajectoryPaths(output);
      const [ng] = (await readJsonl(paths.ng)).map((record) => ngTrajectorySchema.parse(record));
      const [atif] = (await readJsonl(paths.atif)).map((record) => atifTrajectorySchema.parse(record));
      const gym = line!._gym as {
        model_calls: Json[];
        usage: { input_tokens: number; output_tokens: number };
      };
      expect(ng!.model_calls).toHaveLength(gym.model_calls.length);
      expect(ng!.rollout_id).toBe(line!._ng_rollout_id);
      const agentSteps = atif!.steps.filter((step) => step.source === 'agent');
      expect(agentSteps.map((step) => step.message)).toContain('Answer: B');
      expect(atif!.final_metrics).toMatchObject({
        total_prompt_tokens: gym.usage.input_tokens,
        total_completion_tokens: gym.usage.output_tokens,
      });
      expect(atif!.extra).toMatchObject({ reward: line!.reward, outcome: 'reward' });
    } finally {
      await model.close();
      await daemon.cleanup();
      await rm(directory, { recursive: true, force: true });
    }
  });
});
