/**
 * An OpenAI function-calling agent (NeMo Gym's simple agent, for sandboxes): the model calls
 * `bash`, `read_file`, `write_file` and `str_replace`, each run in the sandbox; the run ends
 * when the model answers without a tool call (that answer is the submission).
 */
import { posix } from 'node:path';
import type OpenAI from 'openai';
import { isGymError } from '../../core/errors.ts';
import {
  clipObservation,
  type Harness,
  type HarnessResult,
  type HarnessRunContext,
  isSandboxFilesystemRefusal,
  type SandboxHandle,
} from '../harness.ts';
import { ModelLoop } from '../model-loop.ts';

const TOOLS: OpenAI.Chat.ChatCompletionTool[] = [
  {
    type: 'function',
    function: {
      name: 'bash',
      description:
        'Run a shell command in the repository (a fresh shell each time). Returns the exit code and output.',
      parameters: { type: 'object', properties: { command: { type: 'string' } }, required: ['command'] },
    },
  },
  {
    type: 'function',
    function: {
      name: 'read_file',
      description: 'Read a file (path absolute, or relative to the repository).',
      parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
    },
  },
  {
    type: 'function',
    function: {
      name: 'write_file',
      description: 'Create or overwrite a file with the given content.',
      parameters: {
        type: 'object',
        properties: { path: { type: 'string' }, content: { type: 'string' } },
        required: ['path', 'content'],
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'str_replace',
      description: 'Replace one exact, unique occurrence of old_str with new_str in a file.',
      parameters: {
        type: 'object',
        properties: { path: { type: 'string' }, old_str: { type: 'string' }, new_str: { type: 'string' } },
        required: ['path', 'old_str', 'new_str'],
      },
    },
  },
];

const SYSTEM_PROMPT =
  'You are an engineer resolving an issue in a repository inside a Linux sandbox. Use the tools to inspect, edit and test the code. When the issue is resolved, answer with a short summary and no tool call.';

class ToolError extends Error {}

/**
 * Errors of the daemon that are the agent's own mistake (a missing file, a directory for a file, a
 * file too big to read). Treating them as infra would let an agent end any rollout it is failing
 * as a retried-then-dropped infra error, just by reading a file it made huge.
 */
const AGENT_MISTAKE_CODES = new Set<string>([
  'FILE_NOT_FOUND',
  'PATH_KIND_MISMATCH',
  'VALIDATION_FAILED',
  'FILE_TOO_LARGE',
]);

/** Whether a tool's failure is for the model to see and fix, rather than a fault of the infrastructure. */
function isAgentMistake(error: unknown): boolean {
  if (error instanceof ToolError || error instanceof SyntaxError) return true;
  // A full disk or a read-only place is the sandbox's own file system answering the agent.
  if (isSandboxFilesystemRefusal(error)) return true;
  return isGymError(error) && AGENT_MISTAKE_CODES.has(error.code);
}

function argument(args: Record<string, unknown>, name: string): string {
  const value = args[name];
  if (typeof value !== 'string') throw new ToolError(`missing string argument "${name}"`);
  return value;
}

async function runTool(
  sandbox: SandboxHandle,
  workdir: string,
  name: string,
  args: Record<string, unknown>,
  timeoutMs: number,
): Promise<{ text: string; exitCode: number | null; isGone: boolean; lostReason?: string }> {
  const resolve = (path: string) => posix.resolve(workdir, path);
  switch (name) {
    case 'bash': {
      const result = await sandbox.exec({
        command: argument(args, 'command'),
        cwd: workdir,
        timeoutMs,
        session: 'agent',
      });
      const note = result.status === 'timeout' ? `\n(timed out after ${timeoutMs} ms; killed)` : '';
      return {
        text: `exit code ${result.exitCode ?? -1}${note}\n${result.stdout}${result.stderr}`,
        exitCode: result.exitCode,
        isGone: result.status === 'sandbox_gone',
        ...(result.sandboxLost === true ? { lostReason: result.reason ?? result.status } : {}),
      };
    }
    case 'read_file':
      return {
        text: (await sandbox.readFile(resolve(argument(args, 'path')))).toString('utf8'),
        exitCode: 0,
        isGone: false,
      };
    case 'write_file':
      await sandbox.writeFile(resolve(argument(args, 'path')), Buffer.from(argument(args, 'content')));
      return { text: 'written', exitCode: 0, isGone: false };
    case 'str_replace': {
      const path = resolve(argument(args, 'path'));
      const original = (await sandbox.readFile(path)).toString('utf8');
      const oldText = argument(args, 'old_str');
      const count = oldText === '' ? 0 : original.split(oldText).length - 1;
      if (count !== 1)
        throw new ToolError(`old_str occurs ${count} times in ${path}; it must occur exactly once`);
      await sandbox.writeFile(path, Buffer.from(original.replace(oldText, () => argument(args, 'new_str'))));
      return { text: 'replaced', exitCode: 0, isGone: false };
    }
    default:
      throw new ToolError(`unknown tool "${name}"; the tools are bash, read_file, write_file, str_replace`);
  }
}

export function createToolCallingHarness(): Harness {
  return {
    name: 'tool-calling',
    needsModel: true,
    async run({ sandbox, task, model, limits }: HarnessRunContext): Promise<HarnessResult> {
      const loop = new ModelLoop(model, limits, [
        { role: 'system', content: SYSTEM_PROMPT },
        { role: 'user', content: `The repository is at ${task.workdir}.\n\n${task.instruction}` },
      ]);
      const { clock, messages } = loop;
      const end = loop.end.bind(loop);

      while (true) {
        const stop = loop.limitReached();
        if (stop !== null) return stop;
        const asked = await loop.step({ tools: TOOLS });
        if ('result' in asked) return asked.result;
        const { step, completion } = asked;
        const message = completion.choices[0]?.message;
        const toolCalls = (message?.tool_calls ?? []).filter((call) => call.type === 'function');
        step.assistant = message?.content ?? '';
        messages.push({
          role: 'assistant',
          content: message?.content ?? null,
          ...(toolCalls.length > 0 ? { tool_calls: toolCalls } : {}),
        });
        if (toolCalls.length === 0) {
          loop.finishStep(step);
          return end('submitted', message?.content ?? '');
        }
        const observations: string[] = [];
        for (const call of toolCalls) {
          let text: string;
          let args: Record<string, unknown> = {};
          try {
            const parsed: unknown = JSON.parse(call.function.arguments || '{}');
            // The model's own output: `null` or a list is its mistake to see, not a crash (infra).
            if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed))
              throw new ToolError('the arguments must be a JSON object');
            args = parsed as Record<string, unknown>;
            const timeoutMs = Math.max(1000, Math.min(limits.commandTimeoutMs, clock.remainingMs));
            const outcome = await runTool(sandbox, task.workdir, call.function.name, args, timeoutMs);
            if (outcome.isGone) return end('sandbox_gone', null, 'the sandbox went away during a tool call');
            // The command destroyed its own sandbox: the agent's failure, and nothing left to run in.
            if (outcome.lostReason !== undefined)
              return end('agent_error', null, `a tool call lost the sandbox: ${outcome.lostReason}`);
            step.exitCode = outcome.exitCode;
            text = clipObservation(outcome.text, limits.maxObservationChars);
          } catch (error) {
            // A lost sandbox, a provider or daemon failure: the run ends here and is never graded.
            if (!isAgentMistake(error)) {
              loop.finishStep(step);
              const isGone = isGymError(error, 'SANDBOX_NOT_FOUND');
              return end(
                isGone ? 'sandbox_gone' : 'infra_error',
                null,
                `${call.function.name} failed: ${isGymError(error) ? `${error.code}: ${error.message}` : String(error)}`,
              );
            }
            // Bad arguments, a missing file, an ambiguous replacement: the model sees the error and may fix it.
            text = `error: ${error instanceof SyntaxError ? `arguments are not valid JSON (${error.message})` : (error as Error).message}`;
          }
          step.action = { tool: call.function.name, arguments: args };
          observations.push(text);
          messages.push({ role: 'tool', tool_call_id: call.id, content: text });
        }
        step.observation = observations.join('\n---\n');
        loop.finishStep(step);
      }
    },
  };
}
