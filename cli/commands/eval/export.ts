import { exportTrajectories, formatsOf } from '../../../environments/runner/trajectory-files.ts';
import type { CommandOf } from '../../command.ts';
import type { evalExport } from './definitions.ts';

/**
 * Writes the trajectories of stored rollouts (ours or NeMo Gym's) as NeMo Gym's `ng_trajectory`
 * records and/or Harbor ATIF trajectories, one a line, each checked against its schema.
 */
export const evalExportCommand: CommandOf<typeof evalExport> = {
  async run({ args: [input], options: values, stdout }) {
    const result = await exportTrajectories(input, formatsOf(values.format), values.outputDir);
    if (values.json) stdout.write(`${JSON.stringify(result)}\n`);
    else
      for (const [format, path] of Object.entries(result.files))
        stdout.write(`${format} ${result.rollouts} trajectories to ${path}\n`);
    return 0;
  },
};
