import type { CommandOf } from '../../command.ts';
import { connectWith } from '../../connect.ts';
import { formatTable } from '../../format.ts';
import type { sandboxLs } from './definitions.ts';

export const sandboxLsCommand: CommandOf<typeof sandboxLs> = {
  async run({ options: values, env, stdout }) {
    const client = await connectWith(values, env);
    const sandboxes = await client.listSandboxes({
      labels: values.label,
      ...(values.provider === undefined ? {} : { provider: values.provider }),
    });
    if (values.json) {
      stdout.write(`${JSON.stringify(sandboxes)}\n`);
      return 0;
    }
    const now = Date.now();
    stdout.write(
      formatTable(
        ['ID', 'PROVIDER', 'STATE', 'IMAGE', 'LEASE LEFT', 'LABELS'],
        sandboxes.map((sandbox) => [
          sandbox.id,
          sandbox.provider,
          sandbox.state,
          sandbox.image,
          `${Math.max(0, Math.round((Date.parse(sandbox.leaseExpiresAt) - now) / 1000))}s`,
          Object.entries(sandbox.labels)
            .map(([key, value]) => `${key}=${value}`)
            .join(','),
        ]),
      ),
    );
    return 0;
  },
};
