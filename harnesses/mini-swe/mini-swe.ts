import { isGymError } from '../../core/errors.ts';
import type { ExecResult } from '../../core/schemas/exec.ts';
import { clipObservation, type Harness, type HarnessResult, type HarnessRunContext } from '../harness.ts';
import { ModelLoop } from '../model-loop.ts';
import {
  formatErrorPrompt,
  observationPrompt,
  SUBMIT_SENTINEL,
  systemPrompt,
  taskPrompt,
} from './prompts.ts';

const MAX_CONSECUTIVE_FORMAT_ERRORS = 3;
const OPENER = '```bash';
const CLOSER = '\n```';

/**
 * The commands of a model reply: what the regex /```bash\s*\n([\s\S]*?)\n```/g matches (group 1,
 * trimmed), read by hand. The reply is the policy's, and as a regex a run of line breaks after
 * the opener was quadratic (200,000 of them: 13 s of the runner's one thread). Same reading: the
 * body starts after the last line break of the white space that follows the opener and ends at
 * the next closer (a line break and three backticks); when none follows, the body is empty if
 * that last break is itself the closer and another break comes before it. The next opener is
 * looked for after the match.
 */
export function extractActions(content: string): string[] {
  const actions: string[] = [];
  // Where the closer next occurs from a point; asked from points that only grow, scanned once.
  let askedFrom = Number.POSITIVE_INFINITY;
  let closer = -1;
  const nextCloser = (from: number) => {
    if (from >= askedFrom && (closer === -1 || from <= closer)) return closer;
    askedFrom = from;
    closer = content.indexOf(CLOSER, from);
    return closer;
  };
  for (let open = content.indexOf(OPENER); open !== -1; ) {
    let lastBreak = -1;
    let previousBreak = -1;
    let at = open + OPENER.length;
    for (; at < content.length && /^\s$/.test(content[at]!); at += 1) {
      if (content[at] !== '\n') continue;
      previousBreak = lastBreak;
      lastBreak = at;
    }
    let matchEnd = -1;
    if (lastBreak !== -1) {
      const close = nextCloser(lastBreak + 1);
      if (close !== -1) {
        actions.push(content.slice(lastBreak + 1, close).trim());
        matchEnd = close + CLOSER.length;
      } else if (previousBreak !== -1 && content.startsWith('```', lastBreak + 1)) {
        actions.push(content.slice(previousBreak + 1, lastBreak).trim());
        matchEnd = lastBreak + CLOSER.length;
      }
    }
    open = content.indexOf(OPENER, matchEnd === -1 ? open + 1 : matchEnd);
  }
  return actions;
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
      const loop = new ModelLoop(model, limits, [
        { role: 'system', content: systemPrompt(task.graded) },
        { role: 'user', content: taskPrompt(task.instruction, task.workdir, task.graded) },
      ]);
      const { clock, messages } = loop;
      const end = loop.end.bind(loop);
      let formatErrors = 0;

      while (true) {
        const stop = loop.limitReached();
        if (stop !== null) return stop;
        const asked = await loop.step();
        if ('result' in asked) return asked.result;
        const { step, completion } = asked;
        const content = completion.choices[0]?.message.content ?? '';
        step.assistant = content;
        messages.push({ role: 'assistant', content });
        const actions = extractActions(content);
        if (actions.length !== 1) {
          formatErrors += 1;
          step.error = `format error: ${actions.length} bash blocks`;
          loop.finishStep(step);
          if (formatErrors >= MAX_CONSECUTIVE_FORMAT_ERRORS)
            return end('agent_error', null, `${formatErrors} format errors in a row`);
          messages.push({ role: 'user', content: formatErrorPrompt(actions.length, task.graded) });
          continue;
        }
        formatErrors = 0;
        const command = actions[0]!;
        step.action = { tool: 'bash', arguments: { command } };
        const timeoutMs = Math.max(1000, Math.min(limits.commandTimeoutMs, clock.remainingMs));
        let result: ExecResult;
        try {
          result = await sandbox.exec({
            command,
            cwd: task.workdir,
            timeoutMs,
            session: 'agent',
            maxOutputBytes: 1024 * 1024,
          });
        } catch (error) {
          // A command no shell can be given (a NUL byte, past the kernel's limit on one argument)
          // is the model's to fix: thrown on, it would stop the whole run as a configuration error.
          if (!isGymError(error, 'VALIDATION_FAILED')) throw error;
          step.error = `the command was refused: ${error.message}`;
          loop.finishStep(step);
          step.observation = observationPrompt(null, '', step.error);
          messages.push({ role: 'user', content: step.observation });
          continue;
        }
        step.exitCode = result.exitCode;
        loop.finishStep(step);
        if (result.status === 'sandbox_gone')
          return end('sandbox_gone', null, 'the sandbox went away during a command');
        // The command destroyed its own sandbox: the agent's failure, and nothing left to run in.
        if (result.sandboxLost === true)
          return end('agent_error', null, `a command lost the sandbox: ${result.reason ?? result.status}`);
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
