import { readFile } from 'node:fs/promises';
import { parse as parseYaml } from 'yaml';
import { GymError } from '../../../core/errors.ts';
import { parseOrThrow } from '../../../core/validate.ts';
import { ModelScriptSchema } from '../../../harnesses/scripted-model/script.ts';
import { startScriptedModelServer } from '../../../harnesses/scripted-model/server.ts';
import type { CommandOf } from '../../command.ts';
import type { devModelServer } from './definitions.ts';

export const devModelServerCommand: CommandOf<typeof devModelServer> = {
  async run({ options: values, stdout }) {
    const text = await readFile(values.script, 'utf8').catch((error: Error) => {
      throw new GymError('VALIDATION_FAILED', `cannot read ${values.script}: ${error.message}`);
    });
    const script = parseOrThrow(
      ModelScriptSchema,
      values.script.endsWith('.json') ? JSON.parse(text) : parseYaml(text),
      `script ${values.script}`,
    );
    const server = await startScriptedModelServer(script, { port: values.port });
    stdout.write(`scripted model "${script.model}" at ${server.baseUrl}\n`);
    await new Promise<void>((resolve) => {
      process.once('SIGINT', resolve);
      process.once('SIGTERM', resolve);
    });
    await server.close();
    return 0;
  },
};
