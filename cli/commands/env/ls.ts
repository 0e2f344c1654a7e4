import { parseArgs } from 'node:util';
import { listEnvironments, readRows } from '../../../environments/environment.ts';
import type { Command } from '../../command.ts';
import { formatTable } from '../../format.ts';

export const envLsCommand: Command = {
  summary: 'list the built-in environments',
  usage: 'gym env ls [--json]',
  async run({ args, stdout }) {
    const { values } = parseArgs({ args, options: { json: { type: 'boolean', default: false } } });
    const environments = await listEnvironments();
    const withCounts = await Promise.all(
      environments.map(async (environment) => ({
        ...environment,
        tasks: (await readRows(environment.dataPath)).length,
      })),
    );
    if (values.json) {
      stdout.write(`${JSON.stringify(withCounts)}\n`);
      return 0;
    }
    stdout.write(
      formatTable(
        ['NAME', 'KIND', 'TASKS', 'DEFAULT HARNESS', 'DESCRIPTION'],
        withCounts.map((environment) => [
          environment.name,
          environment.kind,
          String(environment.tasks),
          environment.defaultHarness,
          environment.description,
        ]),
      ),
    );
    return 0;
  },
};
