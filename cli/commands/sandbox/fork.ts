import type { CommandOf } from '../../command.ts';
import { connectWith } from '../../connect.ts';
import type { sandboxFork } from './definitions.ts';

export const sandboxForkCommand: CommandOf<typeof sandboxFork> = {
  async run({ options: values, args: [id], env, stdout }) {
    const client = await connectWith(values, env);
    const forked = await client.fork(id, {
      count: values.count,
      ...(values.label === undefined ? {} : { labels: values.label }),
      ...(values.env === undefined ? {} : { env: values.env }),
      ...(values.ttl === undefined ? {} : { ttlSeconds: values.ttl }),
      ...(values.snapshotTtl === undefined ? {} : { snapshotTtlSeconds: values.snapshotTtl }),
      ...(values.live === true ? { live: true } : {}),
    });
    if (values.json) {
      stdout.write(`${JSON.stringify(forked)}\n`);
      return 0;
    }
    for (const child of forked.sandboxes) stdout.write(`${child.id}\n`);
    return 0;
  },
};
