/** Finds a harness by name: a built-in one, or a third-party module (exporting `createHarness`). */
import { GymError } from '../core/errors.ts';
import { loadFactory } from '../core/modules.ts';
import type { Harness, HarnessFactory } from './harness.ts';
import { createClaudeCodeHarness } from './installed/claude-code.ts';
import { createCodexHarness } from './installed/codex.ts';
import { createMiniSweAgentHarness } from './installed/mini-swe-agent.ts';
import { createOpencodeHarness } from './installed/opencode.ts';
import { createOpenHandsHarness } from './installed/openhands.ts';
import { createPiHarness } from './installed/pi.ts';
import { createQwenCodeHarness } from './installed/qwen-code.ts';
import { createMiniSweHarness } from './mini-swe/mini-swe.ts';
import { createNoopHarness } from './noop.ts';
import { createOracleHarness } from './oracle/oracle.ts';
import { createSingleTurnHarness } from './single-turn/single-turn.ts';
import { createToolCallingHarness } from './tool-calling/tool-calling.ts';

export const BUILT_IN_HARNESSES: Readonly<Record<string, HarnessFactory>> = Object.freeze({
  oracle: () => createOracleHarness(),
  noop: () => createNoopHarness(),
  'single-turn': () => createSingleTurnHarness(),
  'mini-swe': () => createMiniSweHarness(),
  'tool-calling': () => createToolCallingHarness(),
  codex: (options: unknown) => createCodexHarness(options),
  'claude-code': (options: unknown) => createClaudeCodeHarness(options),
  'qwen-code': (options: unknown) => createQwenCodeHarness(options),
  pi: (options: unknown) => createPiHarness(options),
  opencode: (options: unknown) => createOpencodeHarness(options),
  'mini-swe-agent': (options: unknown) => createMiniSweAgentHarness(options),
  openhands: (options: unknown) => createOpenHandsHarness(options),
});

export class HarnessRegistry {
  readonly #factories: Map<string, HarnessFactory>;

  constructor(factories: Readonly<Record<string, HarnessFactory>> = BUILT_IN_HARNESSES) {
    this.#factories = new Map(Object.entries(factories));
  }

  get names(): string[] {
    return [...this.#factories.keys()].sort();
  }

  register(name: string, factory: HarnessFactory): void {
    this.#factories.set(name, factory);
  }

  /** A built-in or registered harness by name, or a module path / package exporting `createHarness`. */
  async create(nameOrModule: string, options: unknown = {}, baseDirectory = process.cwd()): Promise<Harness> {
    const known = this.#factories.get(nameOrModule);
    if (known !== undefined) return known(options);
    if (!nameOrModule.startsWith('.') && !nameOrModule.startsWith('/') && !nameOrModule.includes('/')) {
      throw new GymError(
        'HARNESS_NOT_FOUND',
        `no harness named "${nameOrModule}"; available: ${this.names.join(', ')}; a third-party harness is a module path`,
        {
          details: { harness: nameOrModule, available: this.names },
        },
      );
    }
    const factory = (await loadFactory(nameOrModule, baseDirectory, {
      kind: 'harness',
      exportNames: ['createHarness', 'default'],
      notFoundCode: 'HARNESS_NOT_FOUND',
      invalidCode: 'HARNESS_NOT_FOUND',
    })) as HarnessFactory;
    return factory(options);
  }
}
