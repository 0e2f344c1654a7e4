import { readFileSync } from 'node:fs';
import { access, constants } from 'node:fs/promises';
import type { GymClient } from '../../../client/client.ts';
import { isGymError } from '../../../core/errors.ts';
import { taskImage } from '../../../environments/swe-mini/repository.ts';
import { SWE_MINI_TASKS } from '../../../environments/swe-mini/tasks.ts';
import { DEFAULT_EXEC_HELPER_PATH } from '../../../providers/docker/process-control.ts';
import type { CommandOf } from '../../command.ts';
import { resolveStateDir } from '../../connect.ts';
import { connectOrStartInProcess, type DaemonConnection } from '../../in-process-daemon.ts';
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

/**
 * Whether the default provider has each built-in image and the swe-mini task images; a provider
 * that prepares no images is fine (its specs name images as its backend has them).
 */
async function imageChecks(client: GymClient): Promise<Check[]> {
  try {
    const { provider, images, definitions } = await client.listImages();
    const present = new Set(images.map((image) => image.reference));
    const built = SWE_MINI_TASKS.filter((task) => present.has(taskImage(task))).length;
    return [
      ...definitions.map((definition) => ({
        name: `image ${definition.name}`,
        ok: definition.present,
        detail: `${definition.reference} on provider ${provider}`,
        fix: `bin/gym image build ${definition.name}`,
      })),
      {
        // `gym eval run --env swe-mini` builds what is missing.
        name: 'images of environment swe-mini',
        ok: built === SWE_MINI_TASKS.length,
        detail: `${built} of ${SWE_MINI_TASKS.length} task images built on provider ${provider}`,
        fix: '`bin/gym image build swe-mini` (or the first `bin/gym eval run --env swe-mini`) builds them',
        required: false,
      },
    ];
  } catch (error) {
    if (!isGymError(error, 'CAPABILITY_UNSUPPORTED')) throw error;
    return [{ name: 'images', ok: true, detail: error.message }];
  }
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
    // The providers and their images are the daemon's: asked through its API (one started
    // in-process when none runs), whatever the backend.
    let daemon: DaemonConnection | undefined;
    try {
      daemon = await connectOrStartInProcess({ stateDir, env });
      const health = await daemon.client.health();
      checks.push({
        name: 'daemon',
        ok: !daemon.inProcess,
        detail: daemon.inProcess
          ? `no daemon runs for state ${stateDir}; providers and images checked through one started in-process`
          : `daemon ${health.daemonId} answers (state ${stateDir})`,
        fix: 'gym daemon start (in another terminal, or in the background)',
        // Normal before `gym daemon start` (gym eval run starts one of its own).
        required: false,
      });
      for (const [name, provider] of Object.entries(health.providers)) {
        checks.push({
          name: `provider ${name}`,
          ok: provider.ok,
          detail: provider.message,
          fix:
            name === 'docker'
              ? 'start the engine: `dockerd --bridge=none --iptables=false &` (scripts/setup.sh does this)'
              : 'see the daemon log; check the provider options in the config',
        });
      }
      if (Object.values(health.providers).every((provider) => provider.ok))
        checks.push(...(await imageChecks(daemon.client)));
    } catch (error) {
      checks.push({
        name: 'providers',
        ok: false,
        detail: `no daemon answers, and none could start in-process: ${(error as Error).message}`,
        fix: 'check the config (GYM_CONFIG) and the provider it names, then `gym daemon start`',
      });
    } finally {
      await daemon?.close();
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
