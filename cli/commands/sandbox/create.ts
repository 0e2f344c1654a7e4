import type { SandboxSpecInput } from '../../../core/schemas/sandbox.ts';
import { type CommandOf, UsageError } from '../../command.ts';
import { connectWith } from '../../connect.ts';
import type { sandboxCreate } from './definitions.ts';

export const sandboxCreateCommand: CommandOf<typeof sandboxCreate> = {
  async run({ options: values, env, stdout }) {
    if (values.image === undefined && values.pool === undefined)
      throw new UsageError('--image or --pool is required (see `gym image ls`, `gym pool ls`)');
    if (values.pool !== undefined) {
      // A pooled sandbox was made from the pool's spec before it was asked for: these cannot
      // apply, and the API refuses them too. Silently dropping them once handed out a sandbox
      // with other resources than the ones asked for.
      const specOptions = {
        '--image': values.image,
        '--cpus': values.cpus,
        '--memory': values.memory,
        '--pids': values.pids,
        '--workdir': values.workdir,
        '--user': values.user,
        '--network': values.network,
        '--provider': values.provider,
      };
      const given = Object.entries(specOptions)
        .filter(([, value]) => value !== undefined)
        .map(([flag]) => flag);
      if (given.length > 0)
        throw new UsageError(
          `--pool takes the pool's spec as it is: ${given.join(', ')} cannot be used with it (only --ttl, --label and --env apply per sandbox; see \`gym pool ls\`, or create with --image)`,
        );
    }
    const client = await connectWith(values, env);
    if (values.pool !== undefined) {
      const sandbox = await client.createSandbox({
        pool: values.pool,
        labels: values.label,
        env: values.env,
        ...(values.ttl === undefined ? {} : { ttlSeconds: values.ttl }),
      });
      stdout.write(values.json ? `${JSON.stringify(sandbox)}\n` : `${sandbox.id}\n`);
      return 0;
    }
    if (values.image === undefined) throw new UsageError('--image or --pool is required');
    const resources = {
      ...(values.cpus === undefined ? {} : { cpus: values.cpus }),
      ...(values.memory === undefined ? {} : { memoryMiB: values.memory }),
      ...(values.pids === undefined ? {} : { pidsLimit: values.pids }),
    };
    const spec: SandboxSpecInput = {
      image: values.image,
      resources,
      labels: values.label,
      env: values.env,
      ...(values.ttl === undefined ? {} : { ttlSeconds: values.ttl }),
      ...(values.workdir === undefined ? {} : { workdir: values.workdir }),
      ...(values.user === undefined ? {} : { user: values.user }),
      ...(values.network === undefined ? {} : { network: values.network }),
      ...(values.provider === undefined ? {} : { provider: values.provider }),
    };
    const sandbox = await client.createSandbox(spec);
    stdout.write(values.json ? `${JSON.stringify(sandbox)}\n` : `${sandbox.id}\n`);
    return 0;
  },
};
