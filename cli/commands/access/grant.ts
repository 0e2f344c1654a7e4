import { AccessRightSchema } from '../../../core/schemas/access.ts';
import { parseOrThrow } from '../../../core/validate.ts';
import type { CommandOf } from '../../command.ts';
import { connect, resolveStateDir } from '../../connect.ts';
import type { accessGrant } from './definitions.ts';

export const accessGrantCommand: CommandOf<typeof accessGrant> = {
  async run({ options: values, args: [sandboxIds], env, stdout, stderr }) {
    const client = await connect(resolveStateDir(values.stateDir, env));
    const rights = values.rights.map((right) => parseOrThrow(AccessRightSchema, right, '--rights'));
    const granted = await client.grantAccess({
      sandboxIds,
      rights,
      ...(values.ttl === undefined ? {} : { ttlSeconds: values.ttl }),
    });
    if (values.json) {
      stdout.write(`${JSON.stringify(granted)}\n`);
      return 0;
    }
    // The credential alone on stdout (for $(...)); what it is, on stderr.
    stdout.write(`${granted.token}\n`);
    stderr.write(
      `gym: grant ${granted.id}: ${granted.rights.join(',')} on ${granted.sandboxIds.join(', ')} until ${granted.expiresAt}\n`,
    );
    return 0;
  },
};
