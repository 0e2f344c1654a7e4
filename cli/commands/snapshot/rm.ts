import type { CommandOf } from '../../command.ts';
import { connect, resolveStateDir } from '../../connect.ts';
import type { snapshotRm } from './definitions.ts';

export const snapshotRmCommand: CommandOf<typeof snapshotRm> = {
  async run({ options: values, args: [positionals], env, stdout }) {
    const client = await connect(resolveStateDir(values.stateDir, env));
    for (const id of positionals) {
      await client.deleteSnapshot(id);
      stdout.write(`${id}\n`);
    }
    return 0;
  },
};
