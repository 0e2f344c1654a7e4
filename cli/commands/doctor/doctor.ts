import { readFileSync } from 'node:fs';
import { access, constants } from 'node:fs/promises';
import { silentLogger } from '../../../core/logger.ts';
import { taskImage } from '../../../environments/swe-mini/repository.ts';
import { SWE_MINI_TASKS } from '../../../environments/swe-mini/tasks.ts';
import { ImageBuilder, imageReference } from '../../../images/build.ts';
import { IMAGE_DEFINITIONS } from '../../../images/definitions.ts';
import { createDockerClient } from '../../../providers/docker/index.ts';
import { DEFAULT_EXEC_HELPER_PATH } from '../../../providers/docker/process-control.ts';
import type { CommandOf } from '../../command.ts';
import { connect, resolveStateDir } from '../../connect.ts';
import type { doctor } from '../../program.ts';
import { findOnPath, relayPrivilege } from './host-checks.ts';

interface Check {
  name: string;
  ok: boolean;
  detail: string;
  fix?: string;
  /** False for what works without it (a warning): only required checks decide the exit code. */
  required?: boolean;
}

function readProcStatus(): string | undefined {
  try {
    return readFileSync('/proc/self/status', 'utf8');
  } catch {
    return undefined;
  }
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
      // The swe-mini environment's task images: `gym eval run --env swe-mini` builds what is missing.
      let built = 0;
      for (const task of SWE_MINI_TASKS) if (await builder.exists(taskImage(task))) built += 1;
      checks.push({
        name: 'images of environment swe-mini',
        ok: built === SWE_MINI_TASKS.length,
        detail: `${built} of ${SWE_MINI_TASKS.length} task images built`,
        fix: '`bin/gym image build swe-mini` (or the first `bin/gym eval run --env swe-mini`) builds them',
        required: false,
      });
    }
    for (const [tool, path] of [
      ['debootstrap', '/usr/sbin/debootstrap'],
      ['busybox-static', '/bin/busybox'],
    ] as const) {
      checks.push({ name: tool, ok: await isExecutable(path), detail: path, fix: `apt-get install ${tool}` });
    }
    checks.push({
      name: 'exec helper',
      ok: await isExecutable(DEFAULT_EXEC_HELPER_PATH),
      detail: `${DEFAULT_EXEC_HELPER_PATH} (kills a timed-out command's every process through its cgroup)`,
      fix: 'bash scripts/setup.sh (compiles it; needs gcc and libc6-dev)',
    });
    // The gateway relay enters each sandbox's network namespace: nsenter, as root.
    const nsenter = findOnPath('nsenter', env.PATH);
    checks.push({
      name: 'nsenter (gateway relay)',
      ok: nsenter !== undefined,
      detail: nsenter ?? 'not on PATH',
      fix: 'apt-get install util-linux',
    });
    const privilege = relayPrivilege(process.getuid?.(), readProcStatus());
    checks.push({
      name: 'privileges (gateway relay)',
      ok: privilege.ok,
      detail: privilege.detail,
      fix: 'run gym as root (or with CAP_SYS_ADMIN and CAP_SYS_PTRACE); without them sandboxes get no model gateway',
    });
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
      // Normal before `gym daemon start` (gym eval run starts one of its own).
      checks.push({
        name: 'daemon',
        ok: false,
        detail: (error as Error).message,
        fix: 'gym daemon start (in another terminal, or in the background)',
        required: false,
      });
    }
    if (values.json) stdout.write(`${JSON.stringify(checks)}\n`);
    else {
      for (const check of checks) {
        stdout.write(
          `${check.ok ? 'ok  ' : check.required === false ? 'warn' : 'FAIL'}  ${check.name}: ${check.detail}${check.ok || !check.fix ? '' : `\n      fix: ${check.fix}`}\n`,
        );
      }
    }
    const failed = checks.filter((check) => !check.ok && check.required !== false);
    if (!values.json && failed.length > 0)
      stdout.write(`${failed.length} required check${failed.length === 1 ? '' : 's'} failed\n`);
    return failed.length === 0 ? 0 : 1;
  },
};
