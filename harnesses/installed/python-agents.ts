/**
 * mini-swe-agent, from PyPI (OpenHands is in ./openhands.ts). Our machines cannot reach PyPI, so
 * this adapter is built from the tools' documented CLIs and event formats and tested for the
 * command lines, install commands and parsing; it is not exercised end to end here (see
 * docs/harnesses.md). It installs inside the sandbox into a virtual environment under /opt/gym-agents, so
 * the sandbox needs a route to the package index (network `bridge`), or an image that has the
 * agent (harness option `binaryPath`).
 */
import type { TrajectoryStep } from '../harness.ts';
import {
  createInstalledAgentHarness,
  type InstalledAgentOptions,
  type InstalledAgentRecipe,
} from './installed-agent.ts';

/**
 * Installs a PyPI package into its own virtual environment at `dir`: never into the system
 * Python, which Debian 12+ and Ubuntu 23.04+ refuse (PEP 668, "externally-managed-environment")
 * and which is the task's own Python (an agent's dependencies must not change what the tests
 * see, so no `--break-system-packages`). Without `ensurepip` (Debian's python3-venv not
 * installed), the venv is made without pip and the system pip installs into it (`--python`,
 * pip 22.3 or later).
 */
export function venvInstallCommand(dir: string, requirement: string): string {
  const quoted = `'${requirement.replaceAll("'", "'\\''")}'`;
  return [
    `if python3 -m venv '${dir}' >/dev/null 2>&1; then '${dir}/bin/python' -m pip install --quiet ${quoted};`,
    `elif python3 -m venv --without-pip '${dir}' && python3 -m pip --version >/dev/null 2>&1; then python3 -m pip --python '${dir}/bin/python' install --quiet ${quoted};`,
    `else echo 'no way to make a virtual environment with pip: install python3-venv (or python3-pip) in the image, or use an image with the agent and the harness option binaryPath' >&2; exit 1; fi`,
  ].join(' ');
}

/** mini-swe-agent's `mini`, v1 line: `-y` (no confirmations), `--exit-immediately`, `-o` trajectory, model through litellm's OpenAI route. */
export const MINI_SWE_AGENT_RECIPE: InstalledAgentRecipe = {
  name: 'mini-swe-agent',
  source: {
    kind: 'in-sandbox',
    installCommand: venvInstallCommand('/opt/gym-agents/mini-swe-agent', 'mini-swe-agent>=1.9,<2'),
  },
  sandboxBinaryPath: '/opt/gym-agents/mini-swe-agent/bin/mini',
  configure: (settings) => ({
    files: [],
    env: {
      OPENAI_API_BASE: settings.baseUrl,
      OPENAI_BASE_URL: settings.baseUrl,
      OPENAI_API_KEY: settings.apiKey,
      // Skip the first-run configuration prompt, and do not fail on a model without a price.
      MSWEA_CONFIGURED: 'true',
      MSWEA_COST_TRACKING: 'ignore_errors',
    },
  }),
  command: (settings) => [
    MINI_SWE_AGENT_RECIPE.sandboxBinaryPath,
    '-y',
    '--exit-immediately',
    '-m',
    `openai/${settings.model}`,
    '-l',
    '0',
    '-o',
    `${settings.homeDir}/trajectory.json`,
    '-t',
    settings.instruction,
  ],
  resultFiles: (settings) => [`${settings.homeDir}/trajectory.json`],
  parse: (_stdout, files) => {
    const text = Object.values(files)[0] ?? '';
    if (text === '')
      return { finalMessage: null, steps: [], error: 'mini-swe-agent wrote no trajectory', events: [] };
    const trajectory = JSON.parse(text) as {
      info?: { exit_status?: string; submission?: string };
      messages?: Array<{ role: string; content: unknown }>;
    };
    const steps: TrajectoryStep[] = (trajectory.messages ?? [])
      .filter((message) => message.role === 'assistant')
      .map((message, index) => ({ index, startedAt: '', durationMs: 0, assistant: String(message.content) }));
    const status = trajectory.info?.exit_status ?? 'unknown';
    return {
      finalMessage: trajectory.info?.submission ?? null,
      steps,
      error: status === 'Submitted' ? null : `mini-swe-agent ended with ${status}`,
      events: trajectory.messages ?? [],
    };
  },
};

export const createMiniSweAgentHarness = (options: unknown = {}) =>
  createInstalledAgentHarness(MINI_SWE_AGENT_RECIPE, options as InstalledAgentOptions);
