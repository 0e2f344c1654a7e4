import { GymError } from '../../../core/errors.ts';
import { ImageBuilder } from '../../../images/build.ts';
import { findImageDefinition, IMAGE_DEFINITIONS } from '../../../images/definitions.ts';
import { createDockerClient } from '../../../providers/docker/index.ts';
import type { CommandOf } from '../../command.ts';
import { resolveStateDir } from '../../connect.ts';
import type { imageBuild } from '../../program.ts';
import { formatDuration, leftText, startTicker, Timings } from '../../progress.ts';
import { buildSweMiniImages, IMAGE_SETS } from '../../task-images.ts';

const isImageSet = (name: string): name is (typeof IMAGE_SETS)[number] =>
  (IMAGE_SETS as readonly string[]).includes(name);

export const imageBuildCommand: CommandOf<typeof imageBuild> = {
  async run({ options: values, args: [positionals], env, stdout, stderr, logger }) {
    const names =
      positionals.length > 0 ? positionals : IMAGE_DEFINITIONS.map((definition) => definition.name);
    const sets = names.filter(isImageSet);
    const definitions = names
      .filter((name) => !isImageSet(name))
      .map((name) => {
        const definition = findImageDefinition(name);
        if (definition === undefined) {
          throw new GymError(
            'VALIDATION_FAILED',
            `no image definition or image set named "${name}"; available: ${[...IMAGE_DEFINITIONS.map((item) => item.name), ...IMAGE_SETS].join(', ')}`,
          );
        }
        return definition;
      });
    const docker = createDockerClient();
    const builder = new ImageBuilder(docker, logger);
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
    // An environment's task images (swe-mini: one per task, over the Debian base).
    for (const set of sets) {
      if (!values.json) stdout.write(`building the ${set} task images ...\n`);
      let ready = 0;
      const ticker = startTicker(
        stderr,
        (elapsedMs) => `building the ${set} task images (${ready} ready): ${formatDuration(elapsedMs)}`,
      );
      await buildSweMiniImages(docker, logger, (reference, built) => {
        ready += 1;
        if (stderr.isTTY) stderr.write('\r\x1b[2K');
        stdout.write(
          values.json
            ? `${JSON.stringify({ name: set, reference, built })}\n`
            : `${built ? `built ${reference}` : `${reference} is up to date`}\n`,
        );
      }).finally(() => ticker.stop());
    }
    return 0;
  },
};
