/** The agents whose runtime is made on the host from PyPI (`gym agent install`). */
import type { InstalledAgentRecipe } from './installed-agent.ts';
import { MINI_SWE_AGENT_RECIPE } from './mini-swe-agent.ts';
import { OPENHANDS_RECIPE } from './openhands.ts';
import type { PythonHostSource } from './python-runtime.ts';

export type PythonAgentRecipe = InstalledAgentRecipe & { source: PythonHostSource };

export const PYTHON_AGENT_RECIPES: readonly PythonAgentRecipe[] = [
  MINI_SWE_AGENT_RECIPE as PythonAgentRecipe,
  OPENHANDS_RECIPE as PythonAgentRecipe,
];
