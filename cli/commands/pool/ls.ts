import type { CommandOf } from '../../command.ts';
import { connect, resolveStateDir } from '../../connect.ts';
import { formatTable } from '../../format.ts';
import type { poolLs } from './definitions.ts';

export const poolLsCommand: CommandOf<typeof poolLs> = {
  async run({ options: values, env, stdout }) {
    const pools = await (await connect(resolveStateDir(values.stateDir, env))).listPools();
    if (values.json) {
      stdout.write(`${JSON.stringify(pools)}\n`);
      return 0;
    }
    stdout.write(
      formatTable(
        [
          'NAME',
          'IMAGE',
          'IDLE',
          'LEASED',
          'CREATING',
          'MIN/MAX IDLE',
          'MAX TOTAL',
          'HITS',
          'MISSES',
          'FAILURES',
          'ACQUIRE P50',
          'LAST ERROR',
        ],
        pools.map((pool) => {
          const definition = pool.definition as {
            spec: { image: string };
            minIdle: number;
            maxIdle: number;
            maxTotal: number;
          };
          return [
            pool.name,
            definition.spec.image,
            String(pool.idle),
            String(pool.leased),
            String(pool.creating),
            `${definition.minIdle}/${definition.maxIdle}`,
            String(definition.maxTotal),
            String(pool.hits),
            String(pool.misses),
            String(pool.failures),
            `${pool.acquireLatencyMs.p50} ms`,
            pool.lastError ?? '',
          ];
        }),
      ),
    );
    return 0;
  },
};
