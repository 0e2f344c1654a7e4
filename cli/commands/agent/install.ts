import { homedir } from 'node:os';
import { join } from 'node:path';
import { GymError } from '../../../core/errors.ts';
import { PYTHON_AGENT_RECIPES } from '../../../harnesses/installed/python-recipes.ts';
import {
  ensureRuntimeBundle,
  installPythonAgentRuntime,
} from '../../../harnesses/installed/python-runtime.ts';
import { configuredDebianMirror } from '../../../images/build.ts';
import type { CommandOf } from '../../command.ts';
import { formatDuration, startTicker } from '../../progress.ts';
import type { agentInstall } from './definitions.ts';

/** Makes each named agent's runtime on this host (a runtime of the same pins is kept). */
export const agentInstallCommand: CommandOf<typeof agentInstall> = {
  async run({ options: values, args: [positionals], env, stdout, stderr }) {
    const known = PYTHON_AGENT_RECIPES.map((recipe) => recipe.source.name);
    const names = positionals.length > 0 ? positionals : known;
    for (const name of names)
      if (!known.includes(name))
        throw new GymError(
          'VALIDATION_FAILED',
          `no agent named "${name}" to install; available: ${known.join(', ')}`,
        );
    const cacheDir = values.cacheDir ?? join(env.HOME ?? homedir(), '.cache', 'gym', 'agents');
    const debianMirror = await configuredDebianMirror();
    for (const name of names) {
      const recipe = PYTHON_AGENT_RECIPES.find((item) => item.source.name === name)!;
      let step = 'checking';
      const ticker = startTicker(stderr, (elapsedMs) => `${name}: ${step}, ${formatDuration(elapsedMs)}`);
      const started = Date.now();
      try {
        const { dir, built } = await installPythonAgentRuntime(recipe.source, {
          cacheDir,
          debianMirror,
          log: (message) => {
            step = message;
          },
        });
        // Packed now, so that the first sandbox it is copied into does not wait for the packing.
        step = 'packing it for sandboxes that cannot bind it';
        await ensureRuntimeBundle(dir);
        ticker.stop();
        if (stderr.isTTY) stderr.write('\r\x1b[2K');
        const result = { name, version: recipe.source.version, dir, built, durationMs: Date.now() - started };
        stdout.write(
          values.json
            ? `${JSON.stringify(result)}\n`
            : `${name} ${recipe.source.version}: ${built ? `installed in ${formatDuration(result.durationMs)}` : 'up to date'} (${dir})\n`,
        );
      } finally {
        ticker.stop();
      }
    }
    return 0;
  },
};
