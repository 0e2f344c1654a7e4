import { type CommandOf, UsageError } from '../../command.ts';
import { connectWith } from '../../connect.ts';
import type { sandboxRm } from './definitions.ts';

export const sandboxRmCommand: CommandOf<typeof sandboxRm> = {
  async run({ options: values, args: [positionals], env, stdout }) {
    if (positionals.length === 0 && !values.all)
      throw new UsageError('name at least one sandbox id (or --all)');
    if (positionals.length > 0 && values.all) throw new UsageError('name sandbox ids or --all, not both');
    const client = await connectWith(values, env);
    const ids = values.all ? (await client.listSandboxes()).map((sandbox) => sandbox.id) : positionals;
    await Promise.all(ids.map((id) => client.destroySandbox(id)));
    for (const id of ids) stdout.write(`${id}\n`);
    return 0;
  },
};
