/** Writes the standard trajectory files of a rollouts file (trajectory-export.ts makes each record). */
import { mkdir } from 'node:fs/promises';
import { readJsonl, writeJsonlAtomic } from './files.ts';
import { type TrajectoryFormat, toAtif, toNgTrajectory, trajectoryPaths } from './trajectory-export.ts';

/** The `--format`/`--trajectories` value: one format, or both. */
export const TRAJECTORY_CHOICES = ['ng', 'atif', 'both'] as const;
export type TrajectoryChoice = (typeof TRAJECTORY_CHOICES)[number];

export const formatsOf = (choice: TrajectoryChoice): TrajectoryFormat[] =>
  choice === 'both' ? ['ng', 'atif'] : [choice];

/**
 * One trajectory per rollout line of `rollouts`, in each of `formats`, one JSON object a line, in
 * the rollouts' order, beside the file (or in `outputDirectory`). Every record is checked against
 * its schema before anything is written; a line that does not make a valid one fails the export.
 */
export async function exportTrajectories(
  rollouts: string,
  formats: readonly TrajectoryFormat[],
  outputDirectory?: string,
): Promise<{ rollouts: number; files: Partial<Record<TrajectoryFormat, string>> }> {
  const lines = await readJsonl(rollouts);
  let paths = trajectoryPaths(rollouts);
  if (outputDirectory !== undefined) {
    const name = rollouts.split('/').pop() ?? rollouts;
    paths = trajectoryPaths(`${outputDirectory.replace(/\/$/, '')}/${name}`);
    await mkdir(outputDirectory, { recursive: true });
  }
  const files: Partial<Record<TrajectoryFormat, string>> = {};
  // Every record of every format first: a line that fails leaves no file half the story.
  const records = formats.map((format) =>
    lines.map((line) => (format === 'ng' ? toNgTrajectory(line) : toAtif(line))),
  );
  for (const [position, format] of formats.entries()) {
    await writeJsonlAtomic(paths[format], records[position]!);
    files[format] = paths[format];
  }
  return { rollouts: lines.length, files };
}
