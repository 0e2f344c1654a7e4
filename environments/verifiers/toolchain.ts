/**
 * Tamper evidence for verifiers that run in the agent's own sandbox (script and Harbor tests):
 * before the first command of the verifier, the daemon compares, from outside the sandbox, the
 * files the verifier's interpreters and tools are made of with the sandbox's image
 * (`POST /v1/sandboxes/{id}/toolchain-check`; the rules are in
 * providers/shared/toolchain-rules.ts). A difference is reward 0, graded, with the reason
 * "verifier toolchain tampered" and the paths: never a pass on a `bash` that prints one.
 *
 * The check must come after the agent's processes are stopped (nothing can change a file after
 * it) and before anything runs in the sandbox. Where the provider has no view from outside
 * (`CAPABILITY_UNSUPPORTED`) the verifier still runs and the rollout records
 * `toolchainCheck: "unavailable"`: refusing would make those providers useless for these tasks,
 * and the rollout says plainly what its reward rests on. A check that fails (the engine or the
 * daemon did not answer) is an infra error, retried, never a reward.
 */
import { randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { isGymError } from '../../core/errors.ts';
import type { SandboxHandle } from '../../harnesses/harness.ts';
import type { Verdict } from './verifier.ts';

/** What the rollout's verifier details record of the check. */
export type ToolchainCheckState = 'passed' | 'unavailable';

export const TAMPERED_REASON = 'verifier toolchain tampered';

/**
 * What the tests' environment gets so that python loads no compiled module the agent planted: a
 * `.pyc` beside the image's source (in a `__pycache__` the agent could write, which the check
 * cannot tell from one python wrote itself as root on an image shipped without them) is loaded
 * instead of the source when its header matches. With a cache folder of its own, fresh and of a
 * name the agent cannot know, python 3.8 and later read and write compiled modules only there.
 */
export function verifierPythonEnv(): Record<string, string> {
  return { PYTHONPYCACHEPREFIX: `/tmp/gym-verifier-pycache-${randomBytes(8).toString('hex')}` };
}

/** The interpreter a script's `#!` line names (and, through `env`, the program it runs). */
export function shebangTools(script: string): string[] {
  const first = script.split('\n', 1)[0] ?? '';
  if (!first.startsWith('#!')) return [];
  const words = first
    .slice(2)
    .trim()
    .split(/\s+/)
    .filter((word) => word !== '');
  const [interpreter, ...rest] = words;
  if (interpreter === undefined) return [];
  const program = interpreter.endsWith('/env')
    ? rest.find((word) => !word.startsWith('-') && !word.includes('='))
    : undefined;
  return program === undefined ? [interpreter] : [interpreter, program];
}

/** The tools a tests folder's test.sh names beyond those always checked. */
export async function testScriptTools(testScript: string): Promise<string[]> {
  try {
    return shebangTools(await readFile(testScript, 'utf8'));
  } catch {
    return [];
  }
}

/**
 * The check, as a verifier uses it: a verdict to return at once (tampered: reward 0; the check
 * failed: infra error), or what to record with the verifier's own verdict.
 */
export async function checkVerifierToolchain(
  sandbox: SandboxHandle,
  tools: ReadonlyArray<string>,
  workdirs: ReadonlyArray<string> = [],
): Promise<{ verdict: Verdict } | { toolchainCheck: ToolchainCheckState; toolchainCheckReason?: string }> {
  if (sandbox.checkToolchain === undefined)
    return { toolchainCheck: 'unavailable', toolchainCheckReason: 'this sandbox offers no toolchain check' };
  let result: Awaited<ReturnType<NonNullable<SandboxHandle['checkToolchain']>>>;
  try {
    result = await sandbox.checkToolchain(tools, workdirs);
  } catch (error) {
    if (isGymError(error, 'CAPABILITY_UNSUPPORTED'))
      return { toolchainCheck: 'unavailable', toolchainCheckReason: error.message };
    return {
      verdict: {
        outcome: 'infra_error',
        reward: 0,
        details: {
          reason: `could not check the verifier's toolchain against the image: ${isGymError(error) ? `${error.code}: ` : ''}${(error as Error).message}`,
        },
      },
    };
  }
  if (result.tampered.length === 0) return { toolchainCheck: 'passed' };
  const shown = result.tampered.slice(0, 20);
  return {
    verdict: {
      outcome: 'reward',
      reward: 0,
      details: {
        reason: `${TAMPERED_REASON}: ${shown.map((finding) => `${finding.path} (${finding.change}: ${finding.why})`).join('; ')}${result.tampered.length > shown.length ? `; and ${result.tampered.length - shown.length} more` : ''}`,
        toolchainCheck: 'tampered',
        tamperedPaths: result.tampered.map((finding) => finding.path),
      },
    },
  };
}

/** The verifier's verdict with what the check found, so that every rollout line says it. */
export function withToolchainCheck(
  verdict: Verdict,
  check: { toolchainCheck: ToolchainCheckState; toolchainCheckReason?: string },
): Verdict {
  return { ...verdict, details: { ...verdict.details, ...check } };
}
