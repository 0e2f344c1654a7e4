import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GymClient } from '../../client/client.ts';
import { silentLogger } from '../../core/logger.ts';
import type { HarnessResult } from '../../harnesses/harness.ts';
import { HarnessRegistry } from '../../harnesses/registry.ts';
import { ModelScriptSchema } from '../../harnesses/scripted-model/script.ts';
import { type ScriptedModelServer, startScriptedModelServer } from '../../harnesses/scripted-model/server.ts';
import type { ProviderContext } from '../../providers/sandbox-provider.ts';
import { startTestDaemon, type TestDaemon } from '../../test/daemon-harness.ts';
import { MemoryProvider } from '../../test/fixtures/memory-provider.ts';
import { loadEnvironment, readRows } from '../environment.ts';
import type { VerifyContext } from '../kinds/kind.ts';
import { parseRow, rowInstruction } from '../kinds/kind.ts';
import { promptMessages, ResponsesCreateParamsSchema } from '../kinds/responses-input.ts';
import {
  extractAnswer,
  extractBoxedChoice,
  GRADING_MODES,
  optionLetters,
  verifyExact,
} from '../verifiers/exact.ts';
import { runEval } from './eval.ts';
import { readJsonl } from './files.ts';
import { gymFields } from './rollout-line.ts';

const NEMO_GYM_ROWS = join(import.meta.dirname, '../mcqa/data/nemo-gym.jsonl');

describe("NeMo Gym's responses_create_params as the prompt", () => {
  it('reads a string input, text parts, instructions and developer turns as Chat Completions messages', () => {
    const parse = (params: unknown) => promptMessages(ResponsesCreateParamsSchema.parse(params));
    expect(parse({ input: 'What is 2+2?' })).toEqual([{ role: 'user', content: 'What is 2+2?' }]);
    expect(
      parse({
        instructions: 'Be brief.',
        input: [
          { role: 'developer', content: 'Answer in \\boxed{}.' },
          {
            type: 'message',
            role: 'user',
            content: [
              { type: 'input_text', text: 'Pick ' },
              { type: 'input_text', text: 'one.' },
            ],
          },
          { role: 'assistant', content: [{ type: 'output_text', text: '\\boxed{A}' }] },
        ],
        temperature: 0.2,
      }),
    ).toEqual([
      { role: 'system', content: 'Be brief.' },
      { role: 'system', content: 'Answer in \\boxed{}.' },
      { role: 'user', content: 'Pick one.' },
      { role: 'assistant', content: '\\boxed{A}' },
    ]);
    // The instruction of one-prompt harnesses: system and user text, never the few-shot answers.
    expect(
      rowInstruction({
        responses_create_params: {
          input: [
            { role: 'system', content: 'S' },
            { role: 'user', content: 'U' },
            { role: 'assistant', content: 'A' },
          ],
        },
      }),
    ).toBe('S\n\nU');
  });

  it('refuses a row whose prompt cannot be sent, naming the field, whatever its kind', async () => {
    const exact = (await loadEnvironment('mcqa')).implementation;
    const terminal = await loadEnvironment('terminal');
    const [terminalRow] = await readRows(terminal.dataPath);
    const bad = (params: unknown) => ({ expected_answer: 'B', responses_create_params: params });
    expect(() => parseRow(exact, bad({ input: [] }), 0)).toThrow(
      /row 1 is not a valid exact task: .*responses_create_params\.input/,
    );
    expect(() => parseRow(exact, bad({}), 2)).toThrow(/row 3 .*responses_create_params\.input/);
    expect(() =>
      parseRow(
        exact,
        bad({ input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'x' }] }] }),
        0,
      ),
    ).toThrow(/responses_create_params\.input/);
    expect(() => parseRow(exact, bad({ input: [{ type: 'function_call_output', output: 'x' }] }), 0)).toThrow(
      /responses_create_params\.input/,
    );
    expect(() => parseRow(exact, { responses_create_params: { input: 'Q?' } }, 0)).toThrow(/expected_answer/);
    expect(() => parseRow(exact, bad({ input: 'Q?', temperature: 7 }), 0)).toThrow(
      /responses_create_params\.temperature/,
    );
    expect(() =>
      parseRow(terminal.implementation, { ...terminalRow!, responses_create_params: { input: 5 } }, 0),
    ).toThrow(/not a valid script task: responses_create_params\.input/);
  });
});

describe("grading NeMo Gym's MCQA rows", () => {
  const options = [{ A: 'a' }, { B: 'b' }, { E: 'e' }, { G: 'g' }, { J: 'j' }];
  const letters = optionLetters(options)!;
  const queue = [{ A: 'Stack' }, { B: 'Queue' }, { C: 'Heap' }, { D: 'Trie' }];

  it('takes the option letters of the row, beyond A-D, and the letter in the last \\boxed{}', async () => {
    expect(letters).toEqual(['A', 'B', 'E', 'G', 'J']);
    expect(optionLetters({ A: 'x', B: 'y' })).toEqual(['A', 'B']);
    expect(extractBoxedChoice('first \\boxed{A}, then on reflection \\boxed{\\text{G}}', letters)).toBe('G');
    expect(extractBoxedChoice('\\boxed{E: the fifth}', letters)).toBe('E');
    expect(extractBoxedChoice('\\boxed{(J)}', letters)).toBe('J');
    expect(extractBoxedChoice('\\boxed{Z}', letters)).toBeNull();
    // Before, an expected answer past D was compared with the whole reply: a right answer scored 0.
    expect((await verifyExact('Thinking... \\boxed{G}', 'G', { options })).reward).toBe(1);
  });

  it('reads only \\boxed{} in strict_single_letter_boxed, NeMo Gym default', async () => {
    const strict = { options, gradingMode: 'strict_single_letter_boxed' as const };
    expect(await verifyExact('Answer: G', 'G', strict)).toMatchObject({
      reward: 0,
      details: { extracted_answer: null, grading_mode: 'strict_single_letter_boxed' },
    });
    expect((await verifyExact('so \\boxed{G}', 'G', strict)).reward).toBe(1);
    // Without grading_mode too, as NeMo Gym defaults (it once read `Answer: G` there).
    expect(await verifyExact('Answer: G', 'G', { options })).toMatchObject({
      reward: 0,
      details: { extracted_answer: null, grading_mode: 'strict_single_letter_boxed' },
    });
    expect(await extractAnswer('\\boxed{g}', { options })).toBeNull();
    expect(await extractAnswer('\\boxed{ [E] }', { options })).toBe('E');
    expect(await extractAnswer('\\boxed{E - the fifth}', { options })).toBe('E');
    expect(await extractAnswer('\\boxed{Queue}', { options })).toBeNull();
    expect(await extractAnswer('   ', { options })).toBeNull();
  });

  it("takes an option's text in the last box under lenient_boxed, only when one option matches", async () => {
    const lenient = { options: queue, gradingMode: 'lenient_boxed' as const };
    expect(await extractAnswer('\\boxed{B}', lenient)).toBe('B');
    expect(await extractAnswer('it is a \\boxed{\\text{  queue }}', lenient)).toBe('B');
    expect(await extractAnswer('\\boxed{Queue} (not \\boxed{Stack})', lenient)).toBe('A');
    expect(await extractAnswer('\\boxed{Stack or Queue}', lenient)).toBeNull();
    expect(await extractAnswer('Queue', lenient)).toBeNull();
  });

  it('reads what follows the first Answer: under lenient_answer_colon, a letter or an option text', async () => {
    const colon = { options: queue, gradingMode: 'lenient_answer_colon' as const };
    expect(await extractAnswer('ANSWER: b', colon)).toBe('B');
    expect(await extractAnswer('Answer: \\text{Queue}', colon)).toBe('B');
    expect(await extractAnswer('Answer: B, a queue', colon)).toBeNull();
    expect(await extractAnswer('Answer: Z', colon)).toBeNull();
    expect(await extractAnswer('\\boxed{B}', colon)).toBeNull();
    expect(await extractAnswer('Answer: A\nAnswer: B', colon)).toBe('A');
  });

  it("tries template_metadata.output_regex first (its last match), then the row's mode", async () => {
    const template = { options: queue, outputRegex: 'ANSWER IS\\s*([A-Za-z]+)' };
    expect(await extractAnswer('answer is A... no, ANSWER IS b', template)).toBe('B');
    expect(await extractAnswer('ANSWER IS queue', template)).toBe('B');
    // A letter the options do not list is taken as given (NeMo Gym trusts the template's regex).
    expect(await extractAnswer('ANSWER IS Z', template)).toBe('Z');
    expect(await extractAnswer('ANSWER IS Ｃ', { outputRegex: 'ANSWER IS\\s*(\\S+)' })).toBe('C');
    // No match: the mode (strict by default) reads it.
    expect(await extractAnswer('\\boxed{C}', template)).toBe('C');
    expect(await extractAnswer('Answer: C', template)).toBeNull();
    const several = { options: queue, outputRegex: ['Final choice:\\s*([A-D])', 'Option ([A-D])'] };
    expect(await extractAnswer('Option A, Option D', several)).toBe('D');
    expect(await extractAnswer('Final choice: B. Option D', several)).toBe('B');
  });

  it('refuses a row with a mode NeMo Gym does not know or a regex that does not compile (they once fell back silently)', async () => {
    const exact = (await loadEnvironment('mcqa')).implementation;
    const row = { question: 'Q?', options: queue, expected_answer: 'B' };
    expect(parseRow(exact, { ...row, grading_mode: 'lenient_answer_colon' }, 0)).toBeTruthy();
    expect(() => parseRow(exact, { ...row, grading_mode: 'lenient_answer_colon_md' }, 0)).toThrow(
      /row 1 is not a valid exact task: grading_mode/,
    );
    expect(() => parseRow(exact, { ...row, grading_mode: 'strict' }, 4)).toThrow(/row 5 .*grading_mode/);
    expect(() => parseRow(exact, { ...row, template_metadata: { output_regex: 'ANSWER IS (' } }, 0)).toThrow(
      /template_metadata\.output_regex: must be a regular expression/,
    );
    expect(() =>
      parseRow(exact, { ...row, template_metadata: { output_regex: ['ok ([A-D])', '(?P<x>A)'] } }, 0),
    ).toThrow(/template_metadata\.output_regex\.1/);
  });

  it("has the oracle answer as the row's mode reads a letter", async () => {
    const environment = await loadEnvironment('mcqa');
    const exact = environment.implementation;
    const base = { question: 'Q?', options: queue, expected_answer: 'b' };
    for (const mode of [undefined, ...GRADING_MODES]) {
      const row = mode === undefined ? base : { ...base, grading_mode: mode };
      const { goldAnswer } = exact.task(row, environment, { usesGoldPatch: true });
      const harnessResult = { outcome: 'submitted', submission: goldAnswer, steps: 0 } as HarnessResult;
      const verdict = await exact.verify({ row, harnessResult } as unknown as VerifyContext);
      expect([mode, verdict.reward]).toEqual([mode, 1]);
    }
  });
});

describe('NeMo Gym question rows through gym eval (scripted model)', () => {
  let model: ScriptedModelServer;
  let daemon: TestDaemon;
  let directory: string;

  beforeAll(async () => {
    model = await startScriptedModelServer(
      ModelScriptSchema.parse({
        conversations: [
          { match: 'first-in, first-out', replies: [{ content: 'A queue. \\boxed{B}' }] },
          { match: 'records staged changes', replies: [{ content: '\\boxed{C}' }] },
          { replies: [{ content: '\\boxed{B}' }] },
        ],
      }),
    );
    daemon = await startTestDaemon(
      { providers: [{ name: 'memory' }], gateway: { upstream: { baseUrl: model.baseUrl }, maxRetries: 0 } },
      {
        factories: { memory: (_options: unknown, context: ProviderContext) => new MemoryProvider(context) },
        listen: true,
      },
    );
    directory = await mkdtemp(join(tmpdir(), 'gym-nemo-rows-'));
  });

  afterAll(async () => {
    await daemon.cleanup();
    await model.close();
    await rm(directory, { recursive: true, force: true });
  });

  it('sends each row its own conversation and grades the answers', async () => {
    const environment = await loadEnvironment('mcqa');
    const rows = await readRows(NEMO_GYM_ROWS);
    const output = join(directory, 'single-turn.jsonl');
    const summary = await runEval({
      client: new GymClient({ url: daemon.address.url!, token: daemon.token }),
      environment,
      rows,
      harness: await new HarnessRegistry().create('single-turn'),
      harnessName: 'single-turn',
      modelName: 'm',
      numRepeats: 1,
      concurrency: 1,
      output,
      resume: false,
      maxInfraAttempts: 1,
      logger: silentLogger,
    });
    // What the model received is the rows' prompt, system message and all (once: an empty user message).
    const received = model.requests.map((request) => (request.body as { messages: unknown }).messages);
    expect(received).toEqual([
      [
        {
          role: 'system',
          content: 'You are a careful tutor. Put the letter of your final answer inside \\boxed{}.',
        },
        {
          role: 'user',
          content:
            'Which data structure serves items in first-in, first-out order?\nA: Stack\nB: Queue\nC: Heap\nD: Trie',
        },
      ],
      [
        {
          role: 'user',
          content:
            'Which git command records staged changes in the repository?\nA: git add\nB: git push\nC: git commit\nD: git fetch\nPut the letter of your final answer inside \\boxed{}.',
        },
      ],
      [
        {
          role: 'user',
          content:
            'What is the default port of HTTPS?\nA: 21\nB: 80\nC: 443\nD: 8080\nPut the letter of your final answer inside \\boxed{}.',
        },
      ],
    ]);
    // Its sampling settings too, as Chat Completions names them.
    expect(model.requests.map((request) => request.body as Record<string, unknown>)).toEqual([
      expect.not.objectContaining({ temperature: expect.anything() }),
      expect.objectContaining({ temperature: 0.3, max_tokens: 64 }),
      expect.not.objectContaining({ max_tokens: expect.anything() }),
    ]);
    const rollouts = await readJsonl(output);
    expect(rollouts.map((row) => [row.uuid, row.reward, gymFields(row).outcome])).toEqual([
      ['gym-nemo-row-1', 1, 'reward'],
      ['gym-nemo-row-2', 1, 'reward'],
      ['gym-nemo-row-3', 0, 'reward'],
    ]);
    expect(summary.metrics['mean/reward']).toBeCloseTo(2 / 3, 10);
  });
});
