/**
 * The mini-SWE-agent loop, bash only: ask the model, run the one fenced command it gives through
 * a session in the sandbox, feed the output back, until it prints the submit sentinel or a limit
 * is hit. Format errors are fed back; three in a row end the run.
 */
import type OpenAI from 'openai';
import {
  clipObservation,
  type Harness,
  type HarnessResult,
  type HarnessRunContext,
  RunClock,
  type TrajectoryStep,
} from '../harness.ts';
import { CostMeter, createModelClient, describeModelError } from '../model-client.ts';
import {
  formatErrorPrompt,
  observationPrompt,
  SUBMIT_SENTINEL,
  systemPrompt,
  taskPrompt,
} from './prompts.ts';

const ACTION_PATTERN = /```bash\s*\n([\s\S]*?)\n```/g;
const MAX_CONSECUTIVE_FORMAT_ERRORS = 3;

export function extractActions(content: string): string[] {
  return [...content.matchAll(ACTION_PATTERN)].map((match) => match[1]!.trim());
}

/** The submission when the output's first line is the sentinel (and the command succeeded). */
export function submissionOf(output: string, exitCode: number | null): string | null {
  if (exitCode !== 0) return null;
  const lines = output.trimStart().split('\n');
  return lines[0]?.trim() === SUBMIT_SENTINEL ? lines.slice(1).join('\n') : null;
}

export function createMiniSweHarness(): Harness {
  return {
    name: 'mini-swe',
    needsModel: true,
    async run({ sandbox, task, model, limits }: HarnessRunContext): Promise<HarnessResult> {
      const clock = new RunClock(limits);
      const cost = new CostMeter(limits);
      const trajectory: TrajectoryStep[] = [];
      const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [
        { role: 'system', content: systemPrompt() },
        { role: 'user', content: taskPrompt(task.instruction, task.workdir) },
      ];
      const end = (outcome: HarnessResult['outcome'], submission: string | null, message?: string) =>
        clock.finish({
          outcome,
          submission,
          trajectory,
          steps: trajectory.length,
          costUsd: cost.costUsd,
          extra: { messages },
          ...(message === undefined ? {} : { message }),
        });
      let formatErrors = 0;

      while (true) {
        if (trajectory.length >= limits.maxSteps)
          return end('step_limit', null, `reached ${limits.maxSteps} steps`);
        if (clock.remainingMs <= 0) return end('time_limit', null, `ran past ${limits.wallTimeMs} ms`);
        if (cost.isOverLimit) return end('cost_limit', null, `spent ${cost.costUsd.toFixed(4)} USD`);
        const stepStarted = Date.now();
        const step: TrajectoryStep = {
          index: trajectory.length,
          startedAt: new Date(stepStarted).toISOString(),
          durationMs: 0,
        };
        trajectory.push(step);
        let completion: OpenAI.Chat.ChatCompletion;
        try {
          completion = await createModelClient(model, clock.remainingMs).chat.completions.create({
            model: model.model,
            messages,
          });
        } catch (error) {
          step.error = describeModelError(error);
          step.durationMs = Date.now() - stepStarted;
          return end(clock.remainingMs <= 0 ? 'time_limit' : 'agent_error', null, step.error);
        }
        step.usage = cost.add(completion.usage);
        const content = completion.choices[0]?.message.content ?? '';
        step.assistant = content;
        messages.push({ role: 'assistant', content });
        const actions = extractActions(content);
        if (actions.length !== 1) {
          formatErrors += 1;
          step.error = `format error: ${actions.length} bash blocks`;
          step.durationMs = Date.now() - stepStarted;
          if (formatErrors >= MAX_CONSECUTIVE_FORMAT_ERRORS)
            return end('agent_error', null, `${formatErrors} format errors in a row`);
          messages.push({ role: 'user', content: formatErrorPrompt(actions.length) });
          continue;
        }
        formatErrors = 0;
        const command = actions[0]!;
        step.action = { tool: 'bash', arguments: { command } };
        const timeoutMs = Math.max(1000, Math.min(limits.commandTimeoutMs, clock.remainingMs));
        const result = await sandbox.exec({
          command,
          cwd: task.workdir,
          timeoutMs,
          session: 'agent',
          maxOutputBytes: 1024 * 1024,
        });
        step.exitCode = result.exitCode;
        step.durationMs = Date.now() - stepStarted;
        if (result.status === 'sandbox_gone')
          return end('sandbox_gone', null, 'the sandbox went away during a command');
        const output = `${result.stdout}${result.stderr}`;
        const submission = result.status === 'ok' ? submissionOf(result.stdout, result.exitCode) : null;
        if (submission !== null) {
          step.observation = '(submitted)';
          return end('submitted', submission);
        }
        const note =
          result.status === 'timeout'
            ? `the command ran past ${timeoutMs} ms and was killed, with every process it started; avoid commands that wait for input`
            : result.status === 'oom'
              ? 'the command was killed for exceeding the memory limit'
              : undefined;
        step.observation = observationPrompt(
          result.exitCode,
          clipObservation(output, limits.maxObservationChars),
          note,
        );
        messages.push({ role: 'user', content: step.observation });
      }
    },
  };
}
