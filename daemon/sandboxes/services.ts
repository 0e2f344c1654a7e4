/**
 * Each sandbox's service (`core/schemas/service.ts`): the spec's `entrypoint` run beside the
 * keeper as one long exec of the provider's own (so it works on every provider, and is the
 * sandbox's process: it dies with the sandbox, never outlives it, and never holds up a destroy,
 * which does not wait for it), its output kept in a bounded tail per stream, its end recorded;
 * and the spec's `healthcheck`, with Docker's semantics, gating readiness: create returns once it
 * passes, and throws `SERVICE_UNHEALTHY` (the task's fault, not infra) when the service exits or
 * the check fails `retries` times first.
 *
 * What a daemon restarted with -9 cannot do: hear the output or the end of a service started by
 * the daemon before it (the process lives on in the sandbox; its record here is gone).
 */
import type { Clock } from '../../core/clock.ts';
import { GymError } from '../../core/errors.ts';
import type { Logger } from '../../core/logger.ts';
import { ExecRequestSchema, MAX_EXEC_TIMEOUT_MS } from '../../core/schemas/exec.ts';
import type { SandboxSpec } from '../../core/schemas/sandbox.ts';
import {
  type HealthCheck,
  healthCheckArgv,
  SERVICE_OUTPUT_KEEP_BYTES,
  type ServiceOutput,
  type ServiceView,
} from '../../core/schemas/service.ts';
import type { SandboxProvider } from '../../providers/sandbox-provider.ts';

/** A probe's output kept for the view: enough to say why it failed. */
const PROBE_OUTPUT_CHARS = 4096;

/** The latest `limit` bytes of a stream, and how many before them were dropped. */
export class OutputTail {
  readonly #limit: number;
  #chunks: Buffer[] = [];
  #bytes = 0;
  dropped = 0;

  constructor(limit: number) {
    this.#limit = limit;
  }

  push(chunk: Buffer): void {
    this.#chunks.push(chunk);
    this.#bytes += chunk.length;
    while (this.#bytes > this.#limit) {
      const first = this.#chunks[0] as Buffer;
      const excess = this.#bytes - this.#limit;
      if (first.length <= excess) {
        this.#chunks.shift();
        this.#bytes -= first.length;
        this.dropped += first.length;
      } else {
        this.#chunks[0] = first.subarray(excess);
        this.#bytes -= excess;
        this.dropped += excess;
      }
    }
  }

  text(): string {
    return Buffer.concat(this.#chunks).toString('utf8');
  }
}

interface RunningService {
  view: ServiceView;
  stdout: OutputTail;
  stderr: OutputTail;
  abort: AbortController;
  ended: Promise<void>;
}

export class SandboxServices {
  readonly #services = new Map<string, RunningService>();
  readonly #clock: Clock;
  readonly #logger: Logger;

  constructor(options: { clock: Clock; logger: Logger }) {
    this.#clock = options.clock;
    this.#logger = options.logger;
  }

  /**
   * Starts the spec's service (if it has an entrypoint) and waits for its health check (if it has
   * one). Called by create before the sandbox is handed out; on a throw the caller destroys it.
   * @throws GymError `SERVICE_UNHEALTHY`; `CAPABILITY_UNSUPPORTED` for `entrypoint: "image"` on
   *   a provider that cannot say what the image runs; what the provider throws.
   */
  async start(provider: SandboxProvider, id: string, spec: SandboxSpec): Promise<void> {
    if (spec.entrypoint === undefined && spec.healthcheck === undefined) return;
    const service =
      spec.entrypoint === undefined ? undefined : await this.#run(provider, id, spec, spec.entrypoint);
    if (spec.healthcheck === undefined) return;
    await this.#awaitHealthy(provider, id, spec.healthcheck, service);
  }

  /** The service's state, when the sandbox has one this daemon started. */
  view(id: string): ServiceView | undefined {
    return this.#services.get(id)?.view;
  }

  /**
   * The latest output of the sandbox's service.
   * @throws GymError `VALIDATION_FAILED` when it has none (its spec has no entrypoint).
   */
  output(id: string): ServiceOutput {
    const service = this.#services.get(id);
    if (service === undefined)
      throw new GymError('VALIDATION_FAILED', `sandbox ${id} has no service this daemon started`, {
        details: { sandboxId: id },
      });
    return {
      stdout: service.stdout.text(),
      stderr: service.stderr.text(),
      droppedStdoutBytes: service.stdout.dropped,
      droppedStderrBytes: service.stderr.dropped,
    };
  }

  /** Drops a removed sandbox's service (its process went with the sandbox). */
  forget(id: string): void {
    const service = this.#services.get(id);
    this.#services.delete(id);
    service?.abort.abort();
  }

  async #run(
    provider: SandboxProvider,
    id: string,
    spec: SandboxSpec,
    entrypoint: NonNullable<SandboxSpec['entrypoint']>,
  ): Promise<RunningService> {
    const argv = entrypoint === 'image' ? await imageCommand(provider, spec) : [...entrypoint];
    const stdout = new OutputTail(SERVICE_OUTPUT_KEEP_BYTES);
    const stderr = new OutputTail(SERVICE_OUTPUT_KEEP_BYTES);
    const abort = new AbortController();
    const view: ServiceView = {
      state: spec.healthcheck === undefined ? 'running' : 'starting',
      argv,
      startedAt: new Date(this.#clock.now()).toISOString(),
    };
    const ended = provider
      .exec(
        id,
        // The sandbox's lifetime bounds it; its output goes to the tails, not the result.
        ExecRequestSchema.parse({ argv, timeoutMs: MAX_EXEC_TIMEOUT_MS, maxOutputBytes: 64 }),
        {
          signal: abort.signal,
          onOutput: (stream, chunk) => (stream === 'stdout' ? stdout : stderr).push(chunk),
        },
      )
      .then(
        (result) => ({ status: result.status, exitCode: result.exitCode }),
        (error: unknown) => ({ status: `error: ${(error as Error).message}`, exitCode: null }),
      )
      .then((exit) => {
        view.state = 'exited';
        view.exit = exit;
        view.endedAt = new Date(this.#clock.now()).toISOString();
        if (!abort.signal.aborted) this.#logger.warn({ sandboxId: id, ...exit }, 'sandbox service exited');
      });
    const service = { view, stdout, stderr, abort, ended };
    this.#services.set(id, service);
    return service;
  }

  async #awaitHealthy(
    provider: SandboxProvider,
    id: string,
    check: HealthCheck,
    service: RunningService | undefined,
  ): Promise<void> {
    const argv = healthCheckArgv(check.test);
    if (argv === null) {
      if (service !== undefined) service.view.state = 'running';
      return;
    }
    const health = { failingStreak: 0, lastExitCode: null as number | null, lastOutput: '' };
    if (service !== undefined) service.view.health = health;
    const startedMs = this.#clock.monotonicMs();
    const unhealthy = (reason: string) =>
      new GymError('SERVICE_UNHEALTHY', `the sandbox's service ${reason}`, {
        details: {
          sandboxId: id,
          ...(service?.view.exit === undefined ? {} : { exit: service.view.exit }),
          health,
          ...(service === undefined ? {} : { stderrTail: service.stderr.text().slice(-PROBE_OUTPUT_CHARS) }),
        },
      });
    for (;;) {
      const inStartPeriod = this.#clock.monotonicMs() - startedMs < check.startPeriodMs;
      const waitMs = inStartPeriod ? Math.min(check.startIntervalMs, check.intervalMs) : check.intervalMs;
      // Waits out the interval, or less when the service ends meanwhile.
      await Promise.race([delay(waitMs), service?.ended ?? new Promise(() => {})]);
      if (service?.view.state === 'exited') {
        throw unhealthy(
          `exited before it was healthy (${service?.view.exit?.status}, exit code ${service?.view.exit?.exitCode})`,
        );
      }
      const probe = await provider
        .exec(
          id,
          ExecRequestSchema.parse({ argv, timeoutMs: check.timeoutMs, maxOutputBytes: PROBE_OUTPUT_CHARS }),
        )
        .catch((error: unknown) => ({ status: 'error', exitCode: null, stdout: '', stderr: String(error) }));
      health.lastExitCode = probe.exitCode;
      health.lastOutput = `${probe.stdout}${probe.stderr}`.slice(-PROBE_OUTPUT_CHARS);
      if (probe.status === 'ok' && probe.exitCode === 0) {
        health.failingStreak = 0;
        if (service !== undefined && service.view.state === 'starting') service.view.state = 'healthy';
        return;
      }
      if (probe.status === 'sandbox_gone')
        throw new GymError('SANDBOX_NOT_FOUND', `sandbox ${id} went away while its health check ran`);
      // Docker: a failure in the start period does not count.
      if (this.#clock.monotonicMs() - startedMs < check.startPeriodMs) continue;
      health.failingStreak += 1;
      if (health.failingStreak >= check.retries) {
        if (service !== undefined) service.view.state = 'unhealthy';
        throw unhealthy(`failed its health check ${health.failingStreak} times in a row`);
      }
    }
  }
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}

/**
 * The image's ENTRYPOINT followed by its CMD, as `docker run` starts it.
 * @throws GymError `CAPABILITY_UNSUPPORTED` when the provider cannot tell, `VALIDATION_FAILED` when
 *   the image sets neither.
 */
async function imageCommand(provider: SandboxProvider, spec: SandboxSpec): Promise<string[]> {
  if (provider.inspectImage === undefined)
    throw new GymError(
      'CAPABILITY_UNSUPPORTED',
      `provider ${provider.name} cannot tell what an image runs: give the entrypoint as an argv`,
      { details: { provider: provider.name, capability: 'imageFormats' } },
    );
  const info = await provider.inspectImage(spec.image);
  const argv = [...(info?.entrypoint ?? []), ...(info?.command ?? [])];
  if (argv.length === 0)
    throw new GymError('VALIDATION_FAILED', `image ${spec.image} sets no ENTRYPOINT or CMD to run`, {
      details: { image: spec.image },
    });
  return argv;
}
