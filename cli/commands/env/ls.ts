import { listEnvironments, readRows } from '../../../environments/environment.ts';
import type { CommandOf } from '../../command.ts';
import { formatTable } from '../../format.ts';
import type { envLs } from './definitions.ts';

export const envLsCommand: CommandOf<typeof envLs> = {
  async run({ options: values, stdout }) {
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
