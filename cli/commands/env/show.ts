import { loadEnvironment, readRows } from '../../../environments/environment.ts';
import type { CommandOf } from '../../command.ts';
import type { envShow } from './definitions.ts';

export const envShowCommand: CommandOf<typeof envShow> = {
  async run({ options: values, args: [name], stdout }) {
    const environment = await loadEnvironment(name);
    const rows = await readRows(environment.dataPath);
    if (values.json) {
      stdout.write(
        `${JSON.stringify({ ...environment, tasks: rows.map((row) => row.instance_id ?? row.id) })}\n`,
      );
      return 0;
    }
    stdout.write(`${environment.name} (${environment.kind}): ${environment.description}\n`);
    stdout.write(`default harness: ${environment.defaultHarness}; data: ${environment.dataPath}\n`);
    stdout.write(
      `limits: ${JSON.stringify(environment.limits)}; sandbox: ${JSON.stringify(environment.sandbox)}\n`,
    );
    stdout.write(`${rows.length} tasks:\n`);
    for (const row of rows)
      stdout.write(
        `  ${row.instance_id ?? row.id}  ${String(row.problem_statement ?? row.instruction ?? '')
          .split('\n')[0]
          ?.slice(0, 90)}\n`,
      );
    return 0;
  },
};
