import type { CommandOf } from '../../command.ts';
import { connectWith } from '../../connect.ts';
import type { accessRevoke } from './definitions.ts';

export const accessRevokeCommand: CommandOf<typeof accessRevoke> = {
  async run({ options: values, args: [grantIds], env, stdout }) {
    const client = await connectWith(values, env);
    for (const id of grantIds) {
      await client.revokeAccess(id);
      stdout.write(`${id}\n`);
    }
    return 0;
  },
};
