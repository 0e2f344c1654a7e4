import { parseArgs } from 'node:util';
import { GymError } from '../../../core/errors.ts';
import type { Command } from '../../command.ts';
import { connect, keyValues, numberFlag, resolveStateDir } from '../../connect.ts';

export const poolCreateCommand: Command = {
  summary: 'define (or redefine) a warm pool; it fills in the background',
  usage: `gym pool create NAME --image IMAGE [--min-idle N] [--max-idle N] [--max-total N] [--idle-ttl SECONDS]
                [--refill-concurrency N] [--cpus N] [--memory MIB] [--pids N] [--ttl SECONDS]
                [--env KEY=VALUE]... [--label KEY=VALUE]... [--provider NAME] [--json]`,
  async run({ args, env, stdout }) {
    const { values, positionals } = parseArgs({
      args,
      allowPositionals: true,
      options: {
        image: { type: 'string' },
        'min-idle': { type: 'string' },
        'max-idle': { type: 'string' },
        'max-total': { type: 'string' },
        'idle-ttl': { type: 'string' },
        'refill-concurrency': { type: 'string' },
        cpus: { type: 'string' },
        memory: { type: 'string' },
        pids: { type: 'string' },
        ttl: { type: 'string' },
        env: { type: 'string', multiple: true },
        label: { type: 'string', multiple: true },
        provider: { type: 'string' },
        'state-dir': { type: 'string' },
        json: { type: 'boolean', default: false },
      },
    });
    const [name] = positionals;
    if (name === undefined)
      throw new GymError('VALIDATION_FAILED', 'usage: gym pool create NAME --image IMAGE [options]');
    if (values.image === undefined) throw new GymError('VALIDATION_FAILED', '--image is required');
    const optional = (key: string, value: number | undefined) =>
      value === undefined ? {} : { [key]: value };
    const definition = {
      spec: {
        image: values.image,
        resources: {
          ...optional('cpus', numberFlag('cpus', values.cpus)),
          ...optional('memoryMiB', numberFlag('memory', values.memory)),
          ...optional('pidsLimit', numberFlag('pids', values.pids)),
        },
        env: keyValues('env', values.env),
        labels: keyValues('label', values.label),
        ...optional('ttlSeconds', numberFlag('ttl', values.ttl)),
        ...(values.provider === undefined ? {} : { provider: values.provider }),
      },
      ...optional('minIdle', numberFlag('min-idle', values['min-idle'])),
      ...optional('maxIdle', numberFlag('max-idle', values['max-idle'])),
      ...optional('maxTotal', numberFlag('max-total', values['max-total'])),
      ...optional('idleTtlSeconds', numberFlag('idle-ttl', values['idle-ttl'])),
      ...optional('refillConcurrency', numberFlag('refill-concurrency', values['refill-concurrency'])),
    };
    const client = await connect(resolveStateDir(values['state-dir'], env));
    const stats = await client.definePool(name, definition);
    stdout.write(
      values.json
        ? `${JSON.stringify(stats)}\n`
        : `pool ${name}: filling to ${(stats.definition as { minIdle: number }).minIdle} idle\n`,
    );
    return 0;
  },
};
