/**
 * Apptainer over SSH, as a driver of the SSH-runtime provider (`../ssh-runtime/`: fleet, exec,
 * sessions, files, relay, image store). A sandbox is an instance `gym-<namespace>-<id>` started
 * with `--no-privs --containall --cleanenv --writable-tmpfs --no-home --net --network none` from a
 * sandbox directory (the image, unpacked from the tar kept here into `<workDirectory>/images/`),
 * with the host's busybox bound at `/.gym-tools/busybox`; the fleet's state files are joined
 * with `apptainer instance list --json`.
 *
 * - Privileges: every exec into an instance (commands, sessions, the relay, file transfers)
 *   passes `--no-privs` too, since Apptainer gives root its default capabilities (all of them) again
 *   at each join; another user is `--security uid:N,gid:N`. So a root SSH user makes the agent
 *   uid 0 on the node without capabilities, not root with all of them.
 * - Apptainer gives no cgroup of our own per command: a timeout kills by tag (a process that
 *   clears its environment and leaves its session escapes it).
 * - Limits are `--memory`, `--memory-swap`, `--cpus` and `--pids-limit` (cgroups: root, or v2
 *   delegated to the user); an OOM kill is told from another SIGKILL by the instance's cgroup
 *   counter, read on the host. Derived images are made from the base's sandbox directory with
 *   `apptainer exec --writable`.
 * - Not here (yet): snapshot, SIF files, commands as `srun --overlap` steps.
 */
import { createHash } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { posix } from 'node:path';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { z } from 'zod';
import { GymError } from '../../core/errors.ts';
import type { SandboxSpec } from '../../core/schemas/sandbox.ts';
import type { ProviderContext } from '../sandbox-provider.ts';
import {
  type AbnormalEnd,
  classifyAbnormalEnd,
  OomKillCounts,
  type OutsideView,
} from '../shared/abnormal-end.ts';
import { parseOomKillCount } from '../shared/exec-output.ts';
import { CGROUP1_MEMORY_MOUNT, memoryCounterPaths } from '../shared/host-process.ts';
import { makeBeside } from '../shared/image-folder.ts';
import { EXEC_ID_ENV, hostStopScriptArgv } from '../shared/kill-script.ts';
import { shellJoin } from '../shared/shell.ts';
import type { FleetHost } from '../ssh/host-fleet.ts';
import type * as Runtime from '../ssh-runtime/driver.ts';
import { RELAY_IN_SANDBOX, TOOLS } from '../ssh-runtime/driver.ts';
import { sshRuntimeHostSchema, sshRuntimeOptionsSchema } from '../ssh-runtime/options.ts';
import { SshRuntimeProvider } from '../ssh-runtime/ssh-runtime-provider.ts';

/**
 * Apptainer 1.4 runs an instance's start action (`/.singularity.d/actions/start`, which `apptainer
 * build` puts in an image) and ends the instance as soon as nothing runs in it: a plain root
 * filesystem, as our images are, has no start action, and an image's own startscript may end at
 * once. So every instance gets both bound from the host, read-only: the action tells the
 * instance's init to go on and runs the startscript, which sleeps (the host's busybox) for the
 * instance's life. An image's own startscript is not run (a sandbox runs no service of its image).
 */
const START_ACTION = '/.singularity.d/actions/start';
const START_SCRIPT = '/.singularity.d/startscript';
const ACTION_TEXT = `#!${TOOLS} sh\n${TOOLS} kill -CONT 1\nexec ${START_SCRIPT}\n`;
const SCRIPT_TEXT = `#!${TOOLS} sh\nwhile :; do ${TOOLS} sleep 86400; done\n`;

interface HostFile {
  path: string;
  text: string;
}

/** The two files on a host, named by their content so a changed text is a new file. */
function instanceScripts(host: Host): [HostFile, HostFile] {
  const file = (kind: string, text: string) => ({
    path: posix.join(
      host.workDirectory,
      'tools',
      `gym-apptainer-${kind}-${createHash('sha256').update(text).digest('hex').slice(0, 12)}`,
    ),
    text,
  });
  return [file('start', ACTION_TEXT), file('startscript', SCRIPT_TEXT)];
}

/** Writes each file once (beside, then renamed into place), executable. */
function placeInstanceScripts(...files: HostFile[]): string {
  return files
    .map(({ path, text }) => {
      const [target, partial] = [shellJoin([path]), shellJoin([`${path}.partial-$$`])];
      return `{ [ -x ${target} ] || { mkdir -p ${shellJoin([posix.dirname(path)])} && printf '%s' ${shellJoin([text])} > ${partial} && chmod 755 ${partial} && mv ${partial} ${target}; }; }`;
    })
    .join(' && ');
}

/** A host, with the apptainer command there. */
const ApptainerHostSchema = sshRuntimeHostSchema('apptainer');
type ApptainerHost = z.output<typeof ApptainerHostSchema>;
type Host = FleetHost<ApptainerHost>;

export const ApptainerOptionsSchema = sshRuntimeOptionsSchema(ApptainerHostSchema, {});
export type ApptainerOptions = z.input<typeof ApptainerOptionsSchema>;

/**
 * On every `exec` into an instance, not only at its start: Apptainer works out root's capabilities
 * again at each join (from apptainer.conf's "root default capabilities", every one by default),
 * so an exec without it gives root's commands all of them even in an instance started with it.
 * A non-root user has none either way and the flag changes nothing for it.
 */
const UNPRIVILEGED = ['--no-privs'];

/** Apptainer's cgroup flags for the spec's limits (swap capped at the memory limit). */
function resourceFlags(spec: SandboxSpec): string[] {
  const resources = spec.resources ?? {};
  return [
    ...(resources.memoryMiB === undefined
      ? []
      : ['--memory', `${resources.memoryMiB}M`, '--memory-swap', `${resources.memoryMiB}M`]),
    ...(resources.cpus === undefined ? [] : ['--cpus', String(resources.cpus)]),
    ...(resources.pidsLimit === undefined ? [] : ['--pids-limit', String(resources.pidsLimit)]),
  ];
}

/** Apptainer as an SSH runtime; a sandbox's target is its instance's name. */
class ApptainerDriver implements Runtime.SshRuntimeDriver<ApptainerHost, string> {
  readonly runtime = 'apptainer';
  readonly capabilities = {};
  readonly #access: Runtime.RuntimeAccess<ApptainerHost>;
  readonly #oomKills = new OomKillCounts();
  /** Sandbox directories on the hosts, unpacked from a tar of the root filesystem kept here. */
  readonly images: Runtime.RuntimeImageFormat<ApptainerHost> = {
    hostSuffix: '',
    hostTest: '-d',
    cacheSuffix: '.tar',
    keepRootfs: (cacheFile: string, rootfs: Readable) =>
      makeBeside(cacheFile, (partial) => pipeline(rootfs, createWriteStream(partial, { mode: 0o600 }))),
    unpackLine: (partial: string) =>
      `mkdir -p ${shellJoin([partial])} && tar -x --numeric-owner -C ${shellJoin([partial])}`,
    /**
     * A copy of the base's sandbox directory, the files written into the working directory, the
     * command run there (contained, no network, no privileges) with `apptainer exec --writable`.
     */
    derivedSteps: (host, source, basePath, partial, environment) => ({
      // Apptainer makes no mount point in a writable image: the busybox's is made here, and goes
      // with its folder after the command, whatever its end.
      prepare: `cp -a ${shellJoin([basePath, partial])} && mkdir -p ${shellJoin([posix.join(partial, source.workdir), posix.join(partial, posix.dirname(TOOLS))])} && : > ${shellJoin([posix.join(partial, TOOLS)])} && tar -x --no-same-owner -C ${shellJoin([posix.join(partial, source.workdir)])}`,
      // The recipe is a task's, not ours: no more privileges than an agent's command.
      run: `${this.#apptainer(host, [
        ...'exec --no-privs --writable --containall --net --network none'.split(' '),
        ...['--pwd', source.workdir, '--bind', `${host.busyboxPath}:${TOOLS}:ro`, partial],
        ...[TOOLS, 'env', '-i', ...environment, '/bin/sh', '-c', source.command],
      ])}; code=$?; rm -rf ${shellJoin([posix.join(partial, posix.dirname(TOOLS))])}; exit $code`,
      seal: null,
      cleanup: `rm -rf ${shellJoin([partial])}`,
    }),
  };

  constructor(access: Runtime.RuntimeAccess<ApptainerHost>) {
    this.#access = access;
  }

  /** `env K=V ... apptainer ARGS` as one shell line for the host. */
  #apptainer(host: Host, args: string[]): string {
    const env = Object.entries(host.env).map(([key, value]) => `${key}=${value}`);
    return shellJoin(['env', ...env, host.apptainer, ...args]);
  }

  versionLine(host: Host): string {
    return this.#apptainer(host, ['--version']);
  }

  /** The host's instances by name, with their pids; null (`orThrow`: PROVIDER_ERROR) when the listing fails. Throws when the host does not answer. */
  async #instances(host: Host, orThrow = false): Promise<Map<string, number> | null> {
    const listed = await this.#access.run(host, this.#apptainer(host, ['instance', 'list', '--json']));
    if (listed.code !== 0 && orThrow)
      throw new GymError(
        'PROVIDER_ERROR',
        `apptainer instance list failed on ${host.name}: ${listed.stderr.trim()}`,
      );
    if (listed.code !== 0) return null;
    const parsed = JSON.parse(listed.stdout.toString()) as {
      instances?: Array<{ instance: string; pid: number }>;
    };
    return new Map((parsed.instances ?? []).map((entry) => [entry.instance, entry.pid]));
  }

  async liveNames(host: Host): Promise<Set<string>> {
    return new Set((await this.#instances(host, true))!.keys());
  }

  async start(host: Host, sandbox: Runtime.SandboxStart): Promise<void> {
    this.#oomKills.start(sandbox.id);
    const errors = shellJoin([`${this.#access.statePath(host, sandbox.id)}.start-error`]);
    const [action, script] = instanceScripts(host);
    // Start's own stdio goes to /dev/null: the instance inherits it and would hold the channel open.
    const started = await this.#access.run(
      host,
      `${placeInstanceScripts(action, script)} && cd / && ${this.#apptainer(host, [
        // Root's default in apptainer.conf is every capability; a non-root user has none anyway.
        ...'instance start --no-privs --containall --cleanenv --writable-tmpfs --no-home --net --network none'.split(
          ' ',
        ),
        '--bind',
        `${host.busyboxPath}:${TOOLS}:ro`,
        ...['--bind', `${action.path}:${START_ACTION}:ro`, '--bind', `${script.path}:${START_SCRIPT}:ro`],
        ...(sandbox.relay === null ? [] : ['--bind', `${sandbox.relay}:${RELAY_IN_SANDBOX}:ro`]),
        ...resourceFlags(sandbox.spec),
        sandbox.image,
        sandbox.name,
      ])} </dev/null >/dev/null 2>${errors}; code=$?; cat ${errors} >&2; rm -f ${errors}; exit $code`,
    );
    if (started.code !== 0)
      throw new GymError(
        'SANDBOX_START_FAILED',
        `apptainer instance start failed on ${host.name}: ${started.stderr.trim()}`,
      );
  }

  async target(_host: Host, id: string): Promise<string> {
    return this.#access.nameOf(id);
  }

  /** `apptainer exec` of argv in the instance, tagged from its first process (the env wrapper comes later). */
  enter(host: Host, name: string, argv: string[], options: { tag?: string; as?: string[] } = {}): string {
    return this.#apptainer(host, [
      'exec',
      ...UNPRIVILEGED,
      ...(options.as ?? []),
      '--cleanenv',
      // Tagged from its first process: one the agent stops before `env` ran is still killed.
      ...(options.tag === undefined ? [] : ['--env', `${EXEC_ID_ENV}=${options.tag}`]),
      // The bound shell enters the working directory (`wrappedArgv`): one the sandbox lacks is
      // then a shell's 126 with its message, where Apptainer's own `--pwd` fails as anything (255).
      '--pwd',
      '/',
      `instance://${name}`,
      ...argv,
    ]);
  }

  isGone(stderr: string): boolean {
    return /no instance found/.test(stderr);
  }

  /**
   * Apptainer's `--security uid:N,gid:N` (the gid is the only group; no capabilities). A setuid
   * call inside the instance cannot do it: under `--no-privs` root there has no CAP_SETUID.
   */
  userFlags(uid: number, gid: number): string[] {
    return uid === 0 && gid === 0 ? [] : ['--security', `uid:${uid},gid:${gid}`];
  }

  async abnormalEnd(host: Host, id: string, sigkilled: boolean): Promise<AbnormalEnd> {
    if (!sigkilled) return 'killed';
    return classifyAbnormalEnd(id, this.#oomKills, {
      outsideView: () => this.#outsideView(host, id),
      probe: async () => null,
    });
  }

  /** The instance seen from its host: whether its keeper runs, and its cgroup's OOM kills. */
  async #outsideView(host: Host, id: string): Promise<OutsideView | null> {
    const instances = await this.#instances(host);
    if (instances === null) return null;
    const pid = instances.get(this.#access.nameOf(id));
    if (pid === undefined) return { isAlive: false, oomKills: null };
    // Read on the host, not from the sandbox, whose files an agent may have replaced.
    const procCgroup = (await this.#access.run(host, `cat /proc/${pid}/cgroup`)).stdout.toString();
    const counters = memoryCounterPaths(procCgroup, '/sys/fs/cgroup', CGROUP1_MEMORY_MOUNT);
    if (counters.length === 0) return { isAlive: true, oomKills: null };
    const counter = await this.#access.run(host, `cat ${shellJoin(counters)} 2>/dev/null; true`);
    return { isAlive: true, oomKills: parseOomKillCount(counter.stdout.toString()) };
  }

  /** The host pid of an instance (its init, in the instance's pid namespace); null when it runs none. */
  async #instancePid(host: Host, name: string): Promise<number | null> {
    const pid = (await this.#instances(host))?.get(name);
    return pid !== undefined && Number.isSafeInteger(pid) && pid > 0 ? pid : null;
  }

  async killScope(host: Host, name: string): Promise<Runtime.KillScope | null> {
    const pid = await this.#instancePid(host, name);
    return pid === null ? null : { namespace: `/proc/${pid}/ns/pid_for_children`, guard: '' };
  }

  /** Every process of the instance but its first (the keeper). */
  async stopLine(host: Host, id: string, name: string): Promise<string> {
    const pid = await this.#instancePid(host, name);
    if (pid === null)
      throw new GymError('PROVIDER_ERROR', `stopping processes of ${id}: its instance is not running`);
    return shellJoin(hostStopScriptArgv(host.busyboxPath, `/proc/${pid}/ns/pid`, pid));
  }

  removeLine(host: Host, id: string): string {
    const stop = this.#apptainer(host, ['instance', 'stop', '--force', this.#access.nameOf(id)]);
    return `${stop} >/dev/null 2>&1; rm -f ${shellJoin([this.#access.statePath(host, id)])}`;
  }

  lost(): void {}

  forget(id: string): void {
    this.#oomKills.forget(id);
  }
}

export class ApptainerProvider extends SshRuntimeProvider<ApptainerHost, string> {
  constructor(options: unknown, context: ProviderContext) {
    super(
      ApptainerHostSchema,
      ApptainerOptionsSchema.parse(options),
      context,
      (access) => new ApptainerDriver(access),
    );
  }
}
