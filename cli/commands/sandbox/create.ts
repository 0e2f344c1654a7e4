import { parseArgs } from 'node:util';
import { GymError } from '../../../core/errors.ts';
import type { SandboxSpecInput } from '../../../core/schemas/sandbox.ts';
import type { Command } from '../../command.ts';
import { connect, keyValues, numberFlag, resolveStateDir } from '../../connect.ts';

export const sandboxCreateCommand: Command = {
  summary: 'create a sandbox and print its id',
  usage: `gym sandbox create --pool NAME [--ttl SECONDS] [--label KEY=VALUE]... [--env KEY=VALUE]... [--json]
gym sandbox create --image IMAGE [--cpus N] [--memory MIB] [--pids N] [--ttl SECONDS]
                   [--label KEY=VALUE]... [--env KEY=VALUE]... [--workdir DIR] [--user USER]
                   [--network none|host|bridge] [--provider NAME] [--json]`,
  async run({ args, env, stdout }) {
    const { values } = parseArgs({
      args,
      options: {
        image: { type: 'string' },
        cpus: { type: 'string' },
        memory: { type: 'string' },
        pids: { type: 'string' },
        ttl: { type: 'string' },
        label: { type: 'string', multiple: true },
        env: { type: 'string', multiple: true },
        workdir: { type: 'string' },
        user: { type: 'string' },
        network: { type: 'string' },
        provider: { type: 'string' },
        pool: { type: 'string' },
        'state-dir': { type: 'string' },
        json: { type: 'boolean', default: false },
      },
    });
    const client = await connect(resolveStateDir(values['state-dir'], env));
    if (values.pool !== undefined) {
      const sandbox = await client.createSandbox({
        pool: values.pool,
        labels: keyValues('label', values.label),
        env: keyValues('env', values.env),
        ...(values.ttl === undefined ? {} : { ttlSeconds: numberFlag('ttl', values.ttl)! }),
      });
      stdout.write(values.json ? `${JSON.stringify(sandbox)}\n` : `${sandbox.id}\n`);
      return 0;
    }
    if (values.image === undefined) {
      throw new GymError(
        'VALIDATION_FAILED',
        '--image or --pool is required (see `gym image ls`, `gym pool ls`)',
      );
    }
    const resources = {
      ...(values.cpus === undefined ? {} : { cpus: numberFlag('cpus', values.cpus) }),
      ...(values.memory === undefined ? {} : { memoryMiB: numberFlag('memory', values.memory) }),
      ...(values.pids === undefined ? {} : { pidsLimit: numberFlag('pids', values.pids) }),
    };
    const spec: SandboxSpecInput = {
      image: values.image,
      resources,
      labels: keyValues('label', values.label),
      env: keyValues('env', values.env),
      ...(values.ttl === undefined ? {} : { ttlSeconds: numberFlag('ttl', values.ttl)! }),
      ...(values.workdir === undefined ? {} : { workdir: values.workdir }),
      ...(values.user === undefined ? {} : { user: values.user }),
      ...(values.network === undefined ? {} : { network: values.network as SandboxSpecInput['network'] }),
      ...(values.provider === undefined ? {} : { provider: values.provider }),
    };
    const sandbox = await client.createSandbox(spec);
    stdout.write(values.json ? `${JSON.stringify(sandbox)}\n` : `${sandbox.id}\n`);
    return 0;
  },
};
