import type { CommandOf } from '../../command.ts';
import { connect, resolveStateDir } from '../../connect.ts';
import type { poolCreate } from './definitions.ts';

export const poolCreateCommand: CommandOf<typeof poolCreate> = {
  async run({ options: values, args: [name], env, stdout }) {
    const optional = (key: string, value: number | undefined) =>
      value === undefined ? {} : { [key]: value };
    const definition = {
      spec: {
        image: values.image,
        resources: {
          ...optional('cpus', values.cpus),
          ...optional('memoryMiB', values.memory),
          ...optional('pidsLimit', values.pids),
        },
        env: values.env,
        labels: values.label,
        ...optional('ttlSeconds', values.ttl),
        ...(values.provider === undefined ? {} : { provider: values.provider }),
      },
      ...optional('minIdle', values.minIdle),
      ...optional('maxIdle', values.maxIdle),
      ...optional('maxTotal', values.maxTotal),
      ...optional('idleTtlSeconds', values.idleTtl),
      ...optional('refillConcurrency', values.refillConcurrency),
    };
    const client = await connect(resolveStateDir(values.stateDir, env));
    const stats = await client.definePool(name, definition);
    stdout.write(
      values.json
        ? `${JSON.stringify(stats)}\n`
        : `pool ${name}: filling to ${(stats.definition as { minIdle: number }).minIdle} idle\n`,
    );
    return 0;
  },
};
