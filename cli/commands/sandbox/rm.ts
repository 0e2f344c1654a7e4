import { parseArgs } from 'node:util';
import { GymError } from '../../../core/errors.ts';
import type { Command } from '../../command.ts';
import { connect, resolveStateDir } from '../../connect.ts';

export const sandboxRmCommand: Command = {
  summary: 'destroy sandboxes (idempotent)',
  usage: 'gym sandbox rm ID... [--all]',
  async run({ args, env, stdout }) {
    const { values, positionals } = parseArgs({
      args,
      allowPositionals: true,
      options: { all: { type: 'boolean', default: false }, 'state-dir': { type: 'string' } },
    });
    const client = await connect(resolveStateDir(values['state-dir'], env));
    const ids = values.all ? (await client.listSandboxes()).map((sandbox) => sandbox.id) : positionals;
    if (ids.length === 0 && !values.all)
      throw new GymError('VALIDATION_FAILED', 'name at least one sandbox id (or --all)');
    await Promise.all(ids.map((id) => client.destroySandbox(id)));
    for (const id of ids) stdout.write(`${id}\n`);
    return 0;
  },
};
