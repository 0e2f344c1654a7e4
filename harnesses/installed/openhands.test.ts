/**
 * The OpenHands recipe, and its reading of runs of the real agent: every fixture under
 * test/fixtures/openhands-events/ is what our runner printed (and the trajectory file it wrote),
 * running openhands-sdk 1.58.2 in gym/debian-base against the scripted model with the
 * conversations of test/fixtures/openhands-conversations.ts (and a few more: a refused key, an
 * agent that repeats itself, one that only talks, calls the SDK rejects). The runs other than
 * the fix leave out their first line, the SystemPromptEvent, the same in every run.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { HarnessRegistry } from '../registry.ts';
import type { AgentRunSettings } from './installed-agent.ts';
import {
  OPENHANDS_RECIPE,
  OPENHANDS_VERSION,
  parseOpenHandsRun,
  readOpenHandsTrajectory,
} from './openhands.ts';

const fixture = (name: string) =>
  readFileSync(new URL(`../../test/fixtures/openhands-events/${name}`, import.meta.url), 'utf8');

const settings: AgentRunSettings = {
  baseUrl: 'http://127.0.0.1:4000/v1/gateway/ro-1/v1',
  apiKey: 'gym-ro-key',
  model: 'policy "v1"',
  workdir: '/work/repo',
  instruction: '--help is not a flag here: fix the bug.',
  homeDir: '/tmp/gym-agent-openhands',
};
const TRAJECTORY = '/tmp/gym-agent-openhands/trajectory.json';
const parse = (stdout: string, trajectory = '') =>
  OPENHANDS_RECIPE.parse(stdout, { [TRAJECTORY]: trajectory });

describe('OpenHands recipe', () => {
  it('runs our runner from the Python runtime, the model through the gateway from the environment', () => {
    expect(OPENHANDS_RECIPE.source).toEqual({
      kind: 'python-host',
      name: 'openhands',
      version: OPENHANDS_VERSION,
      lockFile: 'openhands.lock',
      files: [{ from: 'openhands_headless.py', to: 'share/gym/openhands_headless.py' }],
      launchers: { 'openhands-gym': ['share/gym/openhands_headless.py'] },
    });
    expect(OPENHANDS_RECIPE.sandboxBinaryPath).toBe('/opt/gym-agents/openhands/bin/openhands-gym');
    // The task is a file: argv holds no more than 128 KiB in one argument, nor options in disguise.
    expect(OPENHANDS_RECIPE.command(settings)).toEqual([
      '/opt/gym-agents/openhands/bin/openhands-gym',
      '--task-file',
      '/tmp/gym-agent-openhands/task.md',
      '--trajectory',
      TRAJECTORY,
      '--workdir',
      '/work/repo',
    ]);
    expect(OPENHANDS_RECIPE.resultFiles?.(settings)).toEqual([TRAJECTORY]);
    expect(OPENHANDS_RECIPE.configure(settings)).toEqual({
      files: [{ path: '/tmp/gym-agent-openhands/task.md', content: settings.instruction }],
      env: {
        LLM_MODEL: 'openai/policy "v1"',
        LLM_BASE_URL: settings.baseUrl,
        LLM_API_KEY: 'gym-ro-key',
        LITELLM_LOCAL_MODEL_COST_MAP: 'True',
        OPENHANDS_SUPPRESS_BANNER: '1',
      },
    });
  });

  it('is the registry\'s "openhands"', async () => {
    const harness = await new HarnessRegistry().create('openhands');
    expect(harness.name).toBe('openhands');
    expect(harness.needsModel).toBe(true);
  });
});

describe('OpenHands runner, its set-up (the parts that need no SDK, on the host Python)', () => {
  const runnerDir = new URL('./python/', import.meta.url).pathname;
  const setUp = `import json, os, sys, tempfile
sys.path.insert(0, ${JSON.stringify(runnerDir)})
import openhands_headless as runner
settings = runner.take_model_settings()
runner.keep_files_at_home()
print(json.dumps({"settings": settings, "left": sorted(k for k in os.environ if k.startswith("LLM_")),
  "tempdir": tempfile.gettempdir(), "tmux": os.environ["TMUX_TMPDIR"],
  "costMap": os.environ["LITELLM_LOCAL_MODEL_COST_MAP"]}))`;

  it("takes the model's settings out of the environment the agent's commands inherit, and keeps scratch under HOME", () => {
    const home = mkdtempSync(join(tmpdir(), 'gym-oh-home-'));
    try {
      const output = execFileSync('python3', ['-B', '-c', setUp], {
        env: {
          PATH: process.env.PATH,
          HOME: home,
          LLM_MODEL: 'openai/policy',
          LLM_BASE_URL: 'http://127.0.0.1:9/v1',
          LLM_API_KEY: 'gym-ro-key',
        },
        encoding: 'utf8',
      });
      expect(JSON.parse(output)).toEqual({
        settings: {
          LLM_MODEL: 'openai/policy',
          LLM_BASE_URL: 'http://127.0.0.1:9/v1',
          LLM_API_KEY: 'gym-ro-key',
          LLM_API_MODE: '',
        },
        left: [],
        tempdir: join(home, 'tmp'),
        tmux: join(home, 'tmp'),
        costMap: 'True',
      });
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
  });

  it('refuses to run without a model, saying which setting is missing', () => {
    const run = spawnSync('python3', ['-B', '-c', setUp], {
      env: { PATH: process.env.PATH, HOME: tmpdir(), LLM_API_KEY: 'k' },
      encoding: 'utf8',
    });
    expect(run.status).toBe(2);
    expect(run.stderr).toContain('openhands-gym: set LLM_MODEL and LLM_BASE_URL (the model to use)');
  });
});

describe('OpenHands runs read from the runner', () => {
  it('the fix: the edit, the test run and finish are steps, each with what it gave back; finish is the answer', () => {
    const parsed = parse(fixture('fix.stdout.jsonl'), fixture('fix.trajectory'));
    expect(parsed.error).toBeNull();
    expect(parsed.finalMessage).toBe('add now returns a + b; the tests pass.');
    expect(parsed.events.map((event) => (event as { kind: string }).kind)).toEqual([
      'SystemPromptEvent',
      'MessageEvent',
      'ActionEvent',
      'ObservationEvent',
      'ActionEvent',
      'ObservationEvent',
      'ActionEvent',
      'ObservationEvent',
    ]);
    expect(parsed.steps).toHaveLength(3);
    expect(parsed.steps[0]).toMatchObject({
      index: 0,
      assistant: 'The function subtracts; it must add.',
      action: {
        tool: 'file_editor',
        arguments: {
          command: 'str_replace',
          path: '/work/repo/calc.py',
          old_str: 'return a - b',
          new_str: 'return a + b',
        },
      },
    });
    expect(parsed.steps[0]!.observation).toContain('The file /work/repo/calc.py has been edited.');
    expect(parsed.steps[0]!.error).toBeUndefined();
    expect(parsed.steps[1]).toMatchObject({
      index: 1,
      action: { tool: 'terminal', arguments: { command: 'python3 -m pytest -q', is_input: false } },
      exitCode: 0,
    });
    expect(parsed.steps[1]!.observation).toContain('1 passed');
    expect(parsed.steps[2]).toMatchObject({
      index: 2,
      action: { tool: 'finish', arguments: { message: 'add now returns a + b; the tests pass.' } },
    });
    // Timed from the action to its observation (the pytest run took a measurable while).
    expect(parsed.steps[1]!.startedAt).toMatch(/^\d{4}-\d\d-\d\dT/);
    expect(parsed.steps[1]!.durationMs).toBeGreaterThan(0);
  });

  it('the trajectory file stands in for stdout that has no events, and says the same', () => {
    const fromFile = parse('openhands-gym: nothing printed\n', fixture('fix.trajectory'));
    const fromStdout = parse(fixture('fix.stdout.jsonl'), fixture('fix.trajectory'));
    expect(fromFile.steps.map((step) => step.action)).toEqual(fromStdout.steps.map((step) => step.action));
    expect(fromFile.finalMessage).toBe(fromStdout.finalMessage);
    expect(fromFile.error).toBeNull();
  });

  it('a wrong fix that finishes is no error of the agent: the grader judges it', () => {
    const parsed = parse(fixture('wrong.stdout.jsonl'));
    expect(parsed.error).toBeNull();
    expect(parsed.finalMessage).toBe('Changed the operator in add.');
    expect(parsed.steps.map((step) => step.action?.arguments.new_str ?? step.action?.tool)).toEqual([
      'return a * b',
      'finish',
    ]);
  });

  it('an endless agent killed at its time limit: its steps so far from stdout, no answer, no error of its own', () => {
    const parsed = parse(fixture('endless-killed.stdout.jsonl'));
    expect(parsed.finalMessage).toBeNull();
    expect(parsed.error).toBeNull();
    expect(parsed.steps.length).toBeGreaterThan(5);
    for (const step of parsed.steps)
      expect(step.action).toEqual({
        tool: 'terminal',
        arguments: { command: 'date +%s%N && sleep 5', is_input: false, timeout: null, reset: false },
      });
    // The last action had no observation yet when the run was killed.
    expect(parsed.steps.at(-1)!.observation).toBeUndefined();
    expect(parsed.steps[0]!.exitCode).toBe(0);
  });

  it("an agent the stuck detector stopped: no event says so, the trajectory file's status does", () => {
    const stdout = fixture('stuck.stdout.jsonl');
    const parsed = parse(stdout, fixture('stuck.trajectory'));
    expect(parsed.error).toBe('OpenHands ended "stuck" without finishing');
    expect(parsed.steps).toHaveLength(4);
    expect(parsed.finalMessage).toBeNull();
    // Without the file (the runner killed before writing it) the steps are all there is.
    expect(parse(stdout).error).toBeNull();
  });

  it('an agent that cannot start (the image has no bash for its terminal) says why in the trajectory file', () => {
    const parsed = parse('', fixture('nobash.trajectory'));
    expect(parsed.steps).toEqual([]);
    expect(parsed.error).toBe(
      'OpenHands ended "error": RuntimeError: Could not find bash in PATH. Please provide an explicit shell_path parameter when creating the terminal.',
    );
  });

  it("a key the upstream refuses ends the run with the SDK's error, and no steps", () => {
    const parsed = parse(fixture('denied.stdout.jsonl'));
    expect(parsed.steps).toEqual([]);
    expect(parsed.error).toBe(
      'OpenHands stopped with LLMAuthenticationError: Your LLM API key appears to be invalid or has expired.',
    );
  });

  it('an agent that only answers in text: its message is a step and the final message', () => {
    const parsed = parse(fixture('talk.stdout.jsonl'));
    expect(parsed.error).toBeNull();
    expect(parsed.finalMessage).toBe('I cannot change files here; add should return a + b.');
    expect(parsed.steps).toMatchObject([{ index: 0, assistant: parsed.finalMessage }]);
  });

  it('calls the SDK rejects (a missing argument, no such tool, arguments that are not JSON) are steps with their error', () => {
    const parsed = parse(fixture('badargs.stdout.jsonl'));
    expect(parsed.error).toBeNull();
    expect(parsed.finalMessage).toBe('gave up');
    expect(parsed.steps).toHaveLength(4);
    expect(parsed.steps[0]).toMatchObject({
      action: { tool: 'file_editor', arguments: { command: 'view' } },
    });
    expect(parsed.steps[0]!.error).toContain('path\n  Field required');
    expect(parsed.steps[1]).toMatchObject({ action: { tool: 'no_such_tool', arguments: { x: 1 } } });
    expect(parsed.steps[1]!.error).toContain("Tool 'no_such_tool' not found");
    expect(parsed.steps[2]!.action?.arguments).toMatchObject({ _openhands_malformed_tool_call: true });
    expect(parsed.steps[2]!.error).toContain('unparseable JSON');
    expect(parsed.steps[3]!.error).toBeUndefined();
  });

  it('reads only a trajectory of its own shape; other output is no events and no status', () => {
    expect(readOpenHandsTrajectory('')).toBeNull();
    expect(readOpenHandsTrajectory('[1, 2]')).toBeNull();
    expect(readOpenHandsTrajectory('{"status": "finished"}')).toBeNull();
    expect(readOpenHandsTrajectory('{"status": "error", "events": [null, 3, {"kind": "X"}]}')).toEqual({
      status: 'error',
      error: null,
      events: [{ kind: 'X' }],
    });
    // Lines that are not SDK events (no kind) are not steps.
    expect(parseOpenHandsRun('{"type":"action","command":"ls"}\nnot json\n', '').steps).toEqual([]);
  });
});
