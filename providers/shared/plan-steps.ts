/**
 * The steps of a `plan` image, run the same way on every provider that builds one through its
 * own operations: a `run` step in its working directory as its user (the base image's by
 * default), a `files` step as a directory made as root, the checked tar unpacked into it, then
 * its `chmod` and `chown` applied to what the tar put there. A step that fails says which it was.
 */
import type { Readable } from 'node:stream';
import { GymError } from '../../core/errors.ts';
import type { ImageBuildStep } from '../sandbox-provider.ts';

export interface PlanStepOperations {
  /** Runs one command; a non-zero exit throws `VALIDATION_FAILED` with its output's tail. */
  run(
    argv: string[],
    options: { cwd: string; env: Record<string, string>; user: string | undefined },
  ): Promise<void>;
  /** Unpacks a tar the daemon already checked into `path`, which exists. */
  unpack(path: string, archive: Readable): Promise<void>;
}

/** The base image's defaults a step without its own falls back to. */
export interface PlanStepDefaults {
  workdir: string;
  user: string | undefined;
}

/**
 * Runs the steps in order.
 * @throws GymError `VALIDATION_FAILED` prefixed `(step N of M)` with details `{ step }` (0-based),
 *   for a caller that maps steps back to its recipe (a Dockerfile line); other errors as thrown.
 */
export async function runPlanSteps(
  steps: readonly ImageBuildStep[],
  defaults: PlanStepDefaults,
  operations: PlanStepOperations,
): Promise<void> {
  for (const [index, step] of steps.entries()) {
    try {
      await runStep(step, defaults, operations);
    } catch (error) {
      if (!(error instanceof GymError) || error.code !== 'VALIDATION_FAILED') throw error;
      throw new GymError(error.code, `(step ${index + 1} of ${steps.length}) ${error.message}`, {
        details: { ...error.details, step: index },
      });
    }
  }
}

async function runStep(
  step: ImageBuildStep,
  defaults: PlanStepDefaults,
  operations: PlanStepOperations,
): Promise<void> {
  if (step.kind === 'run') {
    await operations.run(step.argv, {
      cwd: step.workdir ?? defaults.workdir,
      env: step.env,
      user: step.user ?? defaults.user,
    });
    return;
  }
  const asRoot = { cwd: '/', env: {}, user: '0' };
  await operations.run(['mkdir', '-p', '--', step.path], asRoot);
  await operations.unpack(step.path, step.archive());
  const top = step.entries.map((entry) => `${step.path.replace(/\/+$/, '')}/${entry}`);
  if (top.length === 0) return;
  if (step.chmod !== undefined) await operations.run(['chmod', '-R', step.chmod, '--', ...top], asRoot);
  if (step.chown !== undefined) await operations.run(['chown', '-R', step.chown, '--', ...top], asRoot);
}
