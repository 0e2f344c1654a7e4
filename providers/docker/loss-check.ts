/**
 * Why a Docker sandbox's command ended without a normal exit, and whether its sandbox is still
 * there: the OOM killer, the sandbox gone (taken away from outside: not the command's doing), or
 * the sandbox lost by what ran in it (the keeper killed). Read from the host where it can be, as
 * an agent inside can break any probe that runs in the sandbox.
 */
import type Docker from 'dockerode';
import { GymError } from '../../core/errors.ts';
import type { ExecResult } from '../../core/schemas/exec.ts';
import type { SandboxInfo } from '../../core/schemas/sandbox.ts';
import {
  classifyAbnormalEnd,
  type ExecHooks,
  KEEPER_OOM_REASON,
  type OomKillCounts,
  type SandboxLoss,
} from '../shared/abnormal-end.ts';
import { markSandboxLost, OOM_COUNTER_COMMAND, SIGKILL_EXIT_CODE } from '../shared/exec-output.ts';
import { EXEC_HELPER_MOUNT, runOneShotExec } from './one-shot-exec.ts';
import type { ProcessControl } from './process-control.ts';
import {
  engineKilled,
  GVISOR_LIMIT_REASON,
  GVISOR_OOM_REASON,
  helperAnswers,
  type RuntimeTier,
} from './runtime-tier.ts';

/** How long the engine may take to record the end of a container whose keeper was seen dead. */
const EXIT_RECORD_WAIT_MS = 5_000;

/**
 * Exit codes the runtime gives when it could not start a command (126), when gVisor's kernel
 * ended under a running exec (128: `runsc exec` answers it when the host's OOM killer took the
 * sandbox, seen in CI), or when it SIGKILLed the command (137).
 */
const RUNTIME_EXIT_CODES = new Set([126, 128, 137]);
/**
 * Of those, the ones the engine also gives while it is killing the container, when it still
 * reports it running ("cannot exec in a stopped state", 126): asked again of the engine itself.
 * Under gVisor 128 too: its kernel ended (the keeper killed from inside, the host's OOM killer)
 * and the engine reports the container running until runsc's teardown is done, which on a loaded
 * host CI saw outlast the check.
 */
const DYING_EXIT_CODES = new Set([126, 137]);
const GUEST_KERNEL_DYING_EXIT_CODES = new Set([126, 128, 137]);
/** gVisor's teardown is slower than runc's: the wait for the engine to record the end, under it. */
const GUEST_KERNEL_EXIT_RECORD_WAIT_MS = 15_000;

export class LossCheck {
  readonly #processes: ProcessControl;
  readonly #oomCounts: OomKillCounts;
  /** The provider's `get`. */
  readonly #get: (id: string) => Promise<SandboxInfo>;
  /** Sandboxes this provider is destroying: their end is never a command's doing. */
  readonly #destroying = new Set<string>();

  /** The engine and the runtime tier, for a gVisor sandbox that ended of its own limits. */
  readonly #runtime: { docker: Docker; tier: RuntimeTier };

  constructor(
    processes: ProcessControl,
    oomCounts: OomKillCounts,
    get: (id: string) => Promise<SandboxInfo>,
    runtime: { docker: Docker; tier: RuntimeTier },
  ) {
    this.#processes = processes;
    this.#oomCounts = oomCounts;
    this.#get = get;
    this.#runtime = runtime;
  }

  /** The provider starts destroying the sandbox: from now on its end is not a command's doing. */
  destroyStarted(id: string): void {
    this.#destroying.add(id);
  }

  /** The destroy is done; commands that ended with the container have looked already. */
  destroyEnded(id: string): void {
    setTimeout(() => this.#destroying.delete(id), EXIT_RECORD_WAIT_MS).unref();
  }

  /**
   * After an abnormal end, one probe exec both proves the sandbox alive (an exec into a dead or
   * dying container fails) and reads its OOM-kill counter. Inspecting the container instead races
   * with a destroy: the engine reports "running" until its kill has finished.
   */
  hooks(id: string, container: Docker.Container): ExecHooks {
    const noHooks: ExecHooks = { classifyAbnormalEnd: async () => 'sandbox_gone' };
    return {
      classifyAbnormalEnd: () =>
        classifyAbnormalEnd(id, this.#oomCounts, {
          // From the host when it can: the probe runs the sandbox's own `sh`, and an agent that
          // deleted it would make every kill look like a sandbox gone (an infra error).
          outsideView: () => this.#processes.hostView(container),
          lossCause: () => this.end(id, container),
          // The engine answers "cannot exec in a stopped state" (or exit 126) for a sandbox gone.
          probe: () =>
            runOneShotExec(
              container,
              {
                command: OOM_COUNTER_COMMAND,
                env: {},
                stdinEncoding: 'utf8',
                timeoutMs: 10_000,
                maxOutputBytes: 4096,
                user: '0',
              },
              {},
              noHooks,
            ),
        }),
    };
  }

  /**
   * Whether a container seen dead died of what ran in it, by the engine's record of how its first
   * process (the keeper) ended, once the engine has recorded it. Taken away from outside (null):
   * removed or being removed, by this daemon or another; stopped (the keeper ends, 0, only on a
   * signal from outside its pid namespace: `docker stop`, an engine shutting down); killed from
   * outside without an OOM. The agent's doing: the OOM killer took the keeper (the engine saw an
   * OOM kill and the keeper ended by SIGKILL, which nothing inside the sandbox can send PID 1); or,
   * in a container whose keeper is tini and a shell loop (no exec helper), the loop ended by
   * anything but a stop.
   */
  async lossCause(id: string, container: Docker.Container): Promise<SandboxLoss | null> {
    const end = await this.end(id, container);
    return end === 'running' ? null : end;
  }

  /**
   * `lossCause`, or `running` when the engine still reports the container running once it has had
   * time to finish a kill: then it is not being taken away, and only a look at it failed.
   */
  async end(id: string, container: Docker.Container): Promise<SandboxLoss | null | 'running'> {
    const deadline =
      performance.now() +
      (this.#runtime.tier.hasGuestKernel ? GUEST_KERNEL_EXIT_RECORD_WAIT_MS : EXIT_RECORD_WAIT_MS);
    for (;;) {
      if (this.#destroying.has(id)) return null;
      let inspected: Docker.ContainerInspectInfo;
      try {
        inspected = await container.inspect();
      } catch {
        return null;
      }
      const { State: state } = inspected;
      if (state.Status === 'removing' || state.Status === 'dead') return null;
      if (!state.Running) {
        if (state.OOMKilled && state.ExitCode === SIGKILL_EXIT_CODE)
          return { lost: 'oom', reason: KEEPER_OOM_REASON };
        // gVisor's kernel ended with no kill by the engine: the sandbox's own use of its limits
        // (SIGKILL: the host's OOM killer; otherwise it could not make the threads it needed).
        if (
          this.#runtime.tier.hasGuestKernel &&
          state.ExitCode !== 0 &&
          !(await engineKilled(this.#runtime.docker, inspected.Id, new Date(state.StartedAt)).catch(
            () => true,
          ))
        )
          return state.ExitCode === SIGKILL_EXIT_CODE
            ? { lost: 'oom', reason: GVISOR_OOM_REASON }
            : { lost: 'killed', reason: `${GVISOR_LIMIT_REASON} (exit ${state.ExitCode})` };
        const isHelperKeeper = inspected.Config.Entrypoint?.[0] === EXEC_HELPER_MOUNT;
        if (!isHelperKeeper && state.ExitCode !== 0 && state.ExitCode !== 143)
          return {
            lost: 'killed',
            reason: `the sandbox's first process (its keeper) ended with code ${state.ExitCode}, killed from inside, so the sandbox died`,
          };
        return null;
      }
      if (performance.now() > deadline) return 'running';
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }

  /** Whether the engine still starts a command in the container (true where no helper is mounted to ask). */
  #startsCommands(container: Docker.Container): Promise<boolean> {
    return this.#processes.helperBind === null
      ? Promise.resolve(true)
      : helperAnswers(container, EXEC_HELPER_MOUNT);
  }

  /**
   * An exit code that the runtime also gives when it could not start the command or killed it
   * (126, 128, 137) is checked against the container itself: when it is gone, the result is
   * `sandbox_gone`, never output a harness or verifier would take for the command's own. (A
   * container removed as an exec starts answers "OCI runtime exec failed", 126.)
   */
  async confirmAlive(id: string, container: Docker.Container, result: ExecResult): Promise<ExecResult> {
    if (result.status !== 'ok' || !RUNTIME_EXIT_CODES.has(result.exitCode ?? 0)) return result;
    const isAlive = await this.#get(id).then(
      (info) => info.state === 'ready',
      (error: unknown) => !(error instanceof GymError && error.code === 'SANDBOX_NOT_FOUND'),
    );
    // The engine reports a container running until its kill has finished: a command it could
    // not start then is no command's doing. The host's helper tells, not the command's own
    // output, which an agent could write to pass its failure off as an infra fault.
    const dying = this.#runtime.tier.hasGuestKernel ? GUEST_KERNEL_DYING_EXIT_CODES : DYING_EXIT_CODES;
    if (isAlive && (!dying.has(result.exitCode ?? 0) || (await this.#startsCommands(container))))
      return result;
    const end = await this.end(id, container);
    // Still running: the helper could not start either (the sandbox's memory full, say).
    if (end === 'running' && isAlive) return result;
    return end === null || end === 'running'
      ? { ...result, status: 'sandbox_gone', exitCode: null }
      : markSandboxLost(result, end.lost, end.reason);
  }
}
