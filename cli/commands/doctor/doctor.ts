/**
 * `gym doctor`: what gym needs on this host, and how to fix what fails. The host checks of a
 * provider (Docker's exec helper and relay privileges, the static relay of the others) come from
 * the rows of the providers the daemon runs (`providers/registry.ts`), so a host set up for one
 * backend is not failed for another's tools.
 */
import { access, constants } from 'node:fs/promises';
import type { GymClient } from '../../../client/client.ts';
import { isGymError } from '../../../core/errors.ts';
import type { HostCheck } from '../../../core/host-check.ts';
import { type DaemonConfig, loadConfig } from '../../../daemon/config.ts';
import { taskImage } from '../../../environments/swe-mini/repository.ts';
import { SWE_MINI_TASKS } from '../../../environments/swe-mini/tasks.ts';
import { builtInProviderOf } from '../../../providers/registry.ts';
import type { CommandOf } from '../../command.ts';
import { resolveStateDir } from '../../connect.ts';
import { connectOrStartInProcess, type DaemonConnection } from '../../in-process-daemon.ts';
import type { doctor } from './definitions.ts';

type Check = HostCheck;

/** The providers of the configuration (`GYM_CONFIG`, else the default), or undefined when it does not load. */
async function configuredProviders(
  env: Readonly<Record<string, string | undefined>>,
): Promise<DaemonConfig['providers'] | undefined> {
  try {
    return (await loadConfig({ ...(env.GYM_CONFIG ? { configPath: env.GYM_CONFIG } : {}), env })).providers;
  } catch {
    // The daemon check below reports why.
    return undefined;
  }
}

/**
 * The host checks of each provider: those the daemon runs (its registration from the config
 * when the config names it, for its options), else, when no daemon answered, the config's.
 */
async function providerHostChecks(
  running: string[] | undefined,
  configured: DaemonConfig['providers'] | undefined,
  env: Readonly<Record<string, string | undefined>>,
): Promise<Check[]> {
  const registrations =
    running === undefined
      ? (configured ?? [])
      : running.map(
          (name) => configured?.find((provider) => provider.name === name) ?? { name, options: {} },
        );
  const checks: Check[] = [];
  for (const registration of registrations) {
    const row = builtInProviderOf(registration);
    if (row !== undefined)
      checks.push(...(await row.hostChecks({ options: registration.options ?? {}, env })));
  }
  return checks;
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
    const configured = await configuredProviders(env);
    // The provider checks go here, before the daemon's: filled in once the daemon says which it runs.
    const hostChecksAt = checks.length;
    let running: string[] | undefined;
    // The providers and their images are the daemon's: asked through its API (one started
    // in-process when none runs), whatever the backend.
    let daemon: DaemonConnection | undefined;
    try {
      // In here: the state directory may come from GYM_CONFIG, and a config that does not load
      // is a failed check, not a crash.
      const stateDir = resolveStateDir(values.stateDir, env);
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
      running = Object.keys(health.providers);
      for (const [name, provider] of Object.entries(health.providers)) {
        const registration = configured?.find((candidate) => candidate.name === name) ?? { name };
        checks.push({
          name: `provider ${name}`,
          ok: provider.ok,
          detail: provider.message,
          fix:
            builtInProviderOf(registration)?.unhealthyFix ??
            'see the daemon log; check the provider options in the config',
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
    checks.splice(hostChecksAt, 0, ...(await providerHostChecks(running, configured, env)));
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
