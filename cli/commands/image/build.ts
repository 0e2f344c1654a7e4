import { GymError } from '../../../core/errors.ts';
import { ImageBuilder } from '../../../images/build.ts';
import { findImageDefinition, IMAGE_DEFINITIONS } from '../../../images/definitions.ts';
import { createDockerClient } from '../../../providers/docker/index.ts';
import type { CommandOf } from '../../command.ts';
import { resolveStateDir } from '../../connect.ts';
import type { imageBuild } from '../../program.ts';
import { formatDuration, leftText, startTicker, Timings } from '../../progress.ts';

export const imageBuildCommand: CommandOf<typeof imageBuild> = {
  async run({ options: values, args: [positionals], env, stdout, stderr, logger }) {
    const names =
      positionals.length > 0 ? positionals : IMAGE_DEFINITIONS.map((definition) => definition.name);
    const definitions = names.map((name) => {
      const definition = findImageDefinition(name);
      if (definition === undefined) {
        throw new GymError(
          'VALIDATION_FAILED',
          `no image definition named "${name}"; available: ${IMAGE_DEFINITIONS.map((item) => item.name).join(', ')}`,
        );
      }
      return definition;
    });
    const builder = new ImageBuilder(createDockerClient(), logger);
    // The last build's time on this machine is the estimate of the next (debootstrap: a minute).
    const timings = new Timings(resolveStateDir(undefined, env));
    for (const definition of definitions) {
      if (!values.json) stdout.write(`building ${definition.name} ...\n`);
      const key = `image ${definition.name}`;
      const estimateMs = await timings.get(key);
      const ticker = startTicker(stderr, (elapsedMs) =>
        [`building ${definition.name}: ${formatDuration(elapsedMs)}`, leftText(elapsedMs, estimateMs)]
          .filter(Boolean)
          .join(', '),
      );
      const result = await builder.build(definition, { force: values.force }).finally(() => ticker.stop());
      if (result.built) await timings.record(key, result.durationMs);
      if (values.json) stdout.write(`${JSON.stringify(result)}\n`);
      else
        stdout.write(
          `${result.built ? `built ${result.reference} in ${(result.durationMs / 1000).toFixed(1)} s` : `${result.reference} is up to date`}\n`,
        );
    }
    return 0;
  },
};
