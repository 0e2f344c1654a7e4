import { parseArgs } from 'node:util';
import { GymError } from '../../../core/errors.ts';
import type { Command } from '../../command.ts';
import { connect, resolveStateDir } from '../../connect.ts';

export const poolRmCommand: Command = {
  summary: 'drain and delete pools (idle sandboxes destroyed; leased ones keep their leases)',
  usage: 'gym pool rm NAME...',
  async run({ args, env, stdout }) {
    const { values, positionals } = parseArgs({
      args,
      allowPositionals: true,
      options: { 'state-dir': { type: 'string' } },
    });
    if (positionals.length === 0) throw new GymError('VALIDATION_FAILED', 'name at least one pool');
    const client = await connect(resolveStateDir(values['state-dir'], env));
    for (const name of positionals) {
      await client.removePool(name);
      stdout.write(`${name}\n`);
    }
    return 0;
  },
};
