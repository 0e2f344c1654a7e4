import type { CommandOf } from '../../command.ts';
import { connect, resolveStateDir } from '../../connect.ts';
import { formatTable } from '../../format.ts';
import type { accessLs } from './definitions.ts';

export const accessLsCommand: CommandOf<typeof accessLs> = {
  async run({ options: values, env, stdout }) {
    const grants = await (await connect(resolveStateDir(values.stateDir, env))).listAccess();
    if (values.json) {
      stdout.write(`${JSON.stringify(grants)}\n`);
      return 0;
    }
    stdout.write(
      formatTable(
        ['ID', 'SANDBOXES', 'RIGHTS', 'CREATED', 'EXPIRES'],
        grants.map((grant) => [
          grant.id,
          grant.sandboxIds.join(','),
          grant.rights.join(','),
          grant.createdAt,
          grant.expiresAt,
        ]),
      ),
    );
    return 0;
  },
};
