/**
 * A spec's readiness probe (`spec.readiness`): the command runs in the new sandbox until it
 * exits 0, every `intervalMs`, for at most `timeoutMs` in all. Every backend runs it the same way
 * through its own exec, before `create` returns.
 */
import { GymError } from '../../core/errors.ts';
import type { ExecRequest, ExecResult } from '../../core/schemas/exec.ts';
import type { SandboxSpec } from '../../core/schemas/sandbox.ts';

export type ReadinessProbe = NonNullable<SandboxSpec['readiness']>;

/** One try of the probe at most this long, so a hung try leaves time for the next. */
const MAX_TRY_MS = 10_000;

/**
 * Resolves once the probe passed.
 * @throws GymError `SANDBOX_START_FAILED` when the sandbox died meanwhile, or the time ran out
 *   (with the last try's status, exit code and the end of its stderr).
 */
export async function waitUntilReady(
  probe: ReadinessProbe,
  exec: (request: ExecRequest) => Promise<ExecResult>,
): Promise<void> {
  const deadline = performance.now() + probe.timeoutMs;
  let last = '';
  while (performance.now() < deadline) {
    const result = await exec({
      ...(probe.argv === undefined ? { command: probe.command! } : { argv: probe.argv }),
      env: {},
      stdinEncoding: 'utf8',
      timeoutMs: Math.max(1, Math.min(MAX_TRY_MS, Math.ceil(deadline - performance.now()))),
      maxOutputBytes: 4096,
    });
    if (result.status === 'ok' && result.exitCode === 0) return;
    if (result.status === 'sandbox_gone')
      throw new GymError('SANDBOX_START_FAILED', 'the sandbox exited during its readiness probe');
    last = `status ${result.status}, exit ${result.exitCode}: ${result.stderr.slice(-500)}`;
    await new Promise((resolve) => setTimeout(resolve, probe.intervalMs));
  }
  throw new GymError(
    'SANDBOX_START_FAILED',
    `readiness probe did not pass within ${probe.timeoutMs} ms (last: ${last})`,
  );
}
