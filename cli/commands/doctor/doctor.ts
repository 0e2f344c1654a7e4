import { access, constants } from 'node:fs/promises';
import { silentLogger } from '../../../core/logger.ts';
import { ImageBuilder, imageReference } from '../../../images/build.ts';
import { IMAGE_DEFINITIONS } from '../../../images/definitions.ts';
import { createDockerClient } from '../../../providers/docker/index.ts';
import type { CommandOf } from '../../command.ts';
import { connect, resolveStateDir } from '../../connect.ts';
import type { doctor } from '../../program.ts';

interface Check {
  name: string;
  ok: boolean;
  detail: string;
  fix?: string;
}

async function isExecutable(path: string): Promise<boolean> {
  return access(path, constants.X_OK).then(
    () => true,
    () => false,
  );
}

export const doctorCommand: CommandOf<typeof doctor> = {
  async run({ options: values, env, stdout }) {
    const checks: Check[] = [];
    const major = Number(process.versions.node.split('.')[0]);
    checks.push({
      name: 'node',
      ok: major >= 22,
      detail: `Node ${process.versions.node}`,
      fix: 'run `bash scripts/setup.sh` (installs Node 24 into .tools/node) and use bin/gym',
    });
    const docker = createDockerClient();
    const version = await docker.version().catch((error: Error) => error);
    const isDockerUp = !(version instanceof Error);
    checks.push({
      name: 'docker engine',
      ok: isDockerUp,
      detail: isDockerUp ? `Docker ${version.Version} (API ${version.ApiVersion})` : version.message,
      fix: 'start it: `dockerd --bridge=none --iptables=false &` (scripts/setup.sh does this)',
    });
    if (isDockerUp) {
      const builder = new ImageBuilder(docker, silentLogger);
      for (const definition of IMAGE_DEFINITIONS) {
        const reference = await imageReference(definition).catch(
          () => `${definition.name} (cannot hash its recipe)`,
        );
        const exists = await builder.exists(reference);
        checks.push({
          name: `image ${definition.name}`,
          ok: exists,
          detail: reference,
          fix: `bin/gym image build ${definition.name}`,
        });
      }
    }
    for (const [tool, path] of [
      ['debootstrap', '/usr/sbin/debootstrap'],
      ['busybox-static', '/bin/busybox'],
    ] as const) {
      checks.push({ name: tool, ok: await isExecutable(path), detail: path, fix: `apt-get install ${tool}` });
    }
    const stateDir = resolveStateDir(values.stateDir, env);
    try {
      const health = await (await connect(stateDir)).health();
      checks.push({
        name: 'daemon',
        ok: true,
        detail: `daemon ${health.daemonId} answers (state ${stateDir})`,
      });
      for (const [name, provider] of Object.entries(health.providers)) {
        checks.push({
          name: `provider ${name}`,
          ok: provider.ok,
          detail: provider.message,
          fix: 'see the daemon log; check the provider options in the config',
        });
      }
    } catch (error) {
      checks.push({
        name: 'daemon',
        ok: false,
        detail: (error as Error).message,
        fix: 'gym daemon start (in another terminal, or in the background)',
      });
    }
    if (values.json) stdout.write(`${JSON.stringify(checks)}\n`);
    else {
      for (const check of checks) {
        stdout.write(
          `${check.ok ? 'ok  ' : 'FAIL'}  ${check.name}: ${check.detail}${check.ok || !check.fix ? '' : `\n      fix: ${check.fix}`}\n`,
        );
      }
    }
    // The daemon not running is normal before `gym daemon start`; everything else must pass.
    return checks.every((check) => check.ok || check.name === 'daemon') ? 0 : 1;
  },
};
