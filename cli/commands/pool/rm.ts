import type { CommandOf } from '../../command.ts';
import { connect, resolveStateDir } from '../../connect.ts';
import type { poolRm } from './definitions.ts';

export const poolRmCommand: CommandOf<typeof poolRm> = {
  async run({ options: values, args: [positionals], env, stdout }) {
    const client = await connect(resolveStateDir(values.stateDir, env));
    for (const name of positionals) {
      await client.removePool(name);
      stdout.write(`${name}\n`);
    }
    return 0;
  },
};
