/**
 * What `environment.json` holds: the definition of one environment before its kind is loaded.
 * Its own file so that the kinds (which are handed loaded environments) and the loader
 * (`environment.ts`, which loads the kinds) both build on it without importing each other.
 */
import { z } from 'zod';

export const EnvironmentDefinitionSchema = z
  .object({
    name: z.string(),
    description: z.string(),
    /**
     * How its rows are checked, run and graded (environments/kinds/): a built-in kind (`swe`:
     * patch + hidden tests, `script`: tests/test.sh writes a reward, `exact`: string match) or a
     * `./module.ts` in the environment's folder exporting `kind`.
     */
    kind: z.string().min(1),
    defaultHarness: z.string(),
    data: z.string(),
    /** A named image set the CLI can build (`gym image build <images>`). */
    images: z.string().optional(),
    sandbox: z.record(z.string(), z.unknown()).default({}),
    /** The kind's own settings (e.g. `swebench`: imageTemplate, repositories, testTimeoutSec). */
    options: z.record(z.string(), z.unknown()).default({}),
    limits: z.record(z.string(), z.number()).default({}),
  })
  .strict();
export type EnvironmentDefinition = z.output<typeof EnvironmentDefinitionSchema>;
