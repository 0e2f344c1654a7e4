import type { SandboxSpecInput } from '../../../core/schemas/sandbox.ts';
import { type CommandOf, UsageError } from '../../command.ts';
import { connect, resolveStateDir } from '../../connect.ts';
import type { sandboxCreate } from '../../program.ts';

export const sandboxCreateCommand: CommandOf<typeof sandboxCreate> = {
  async run({ options: values, env, stdout }) {
    if (values.image === undefined && values.pool === undefined)
      throw new UsageError('--image or --pool is required (see `gym image ls`, `gym pool ls`)');
    const client = await connect(resolveStateDir(values.stateDir, env));
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
