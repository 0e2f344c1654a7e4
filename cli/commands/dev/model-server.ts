import { readFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { parse as parseYaml } from 'yaml';
import { GymError } from '../../../core/errors.ts';
import { parseOrThrow } from '../../../core/validate.ts';
import { ModelScriptSchema } from '../../../harnesses/scripted-model/script.ts';
import { startScriptedModelServer } from '../../../harnesses/scripted-model/server.ts';
import type { Command } from '../../command.ts';
import { numberFlag } from '../../connect.ts';

export const devModelServerCommand: Command = {
  summary: 'serve a scripted model (Chat Completions, Responses, Anthropic Messages) for tests and demos',
  usage: `gym dev model-server --script FILE.(json|yaml) [--port PORT]

Answers from the script, streaming or not, with tool calls. Point the daemon at it with
GYM_POLICY_BASE_URL=http://127.0.0.1:PORT/v1. Runs until interrupted.`,
  async run({ args, stdout }) {
    const { values } = parseArgs({
      args,
      options: { script: { type: 'string' }, port: { type: 'string', default: '8000' } },
    });
    if (values.script === undefined) throw new GymError('VALIDATION_FAILED', '--script is required');
    const text = await readFile(values.script, 'utf8').catch((error: Error) => {
      throw new GymError('VALIDATION_FAILED', `cannot read ${values.script}: ${error.message}`);
    });
    const script = parseOrThrow(
      ModelScriptSchema,
      values.script.endsWith('.json') ? JSON.parse(text) : parseYaml(text),
      `script ${values.script}`,
    );
    const server = await startScriptedModelServer(script, { port: numberFlag('port', values.port) ?? 8000 });
    stdout.write(`scripted model "${script.model}" at ${server.baseUrl}\n`);
    await new Promise<void>((resolve) => {
      process.once('SIGINT', resolve);
      process.once('SIGTERM', resolve);
    });
    await server.close();
    return 0;
  },
};
