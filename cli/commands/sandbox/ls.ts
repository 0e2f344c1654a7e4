import { parseArgs } from 'node:util';
import type { Command } from '../../command.ts';
import { connect, keyValues, resolveStateDir } from '../../connect.ts';
import { formatTable } from '../../format.ts';

export const sandboxLsCommand: Command = {
  summary: 'list sandboxes',
  usage: 'gym sandbox ls [--label KEY=VALUE]... [--provider NAME] [--json]',
  async run({ args, env, stdout }) {
    const { values } = parseArgs({
      args,
      options: {
        label: { type: 'string', multiple: true },
        provider: { type: 'string' },
        'state-dir': { type: 'string' },
        json: { type: 'boolean', default: false },
      },
    });
    const client = await connect(resolveStateDir(values['state-dir'], env));
    const sandboxes = await client.listSandboxes({
      labels: keyValues('label', values.label),
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
