import { GymError } from '../../../core/errors.ts';
import { ImageBuilder } from '../../../images/build.ts';
import { findImageDefinition, IMAGE_DEFINITIONS } from '../../../images/definitions.ts';
import { createDockerClient } from '../../../providers/docker/index.ts';
import type { CommandOf } from '../../command.ts';
import type { imageBuild } from '../../program.ts';

export const imageBuildCommand: CommandOf<typeof imageBuild> = {
  async run({ options: values, args: [positionals], stdout, logger }) {
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
    for (const definition of definitions) {
      if (!values.json) stdout.write(`building ${definition.name} ...\n`);
      const result = await builder.build(definition, { force: values.force });
      if (values.json) stdout.write(`${JSON.stringify(result)}\n`);
      else
        stdout.write(
          `${result.built ? `built ${result.reference} in ${(result.durationMs / 1000).toFixed(1)} s` : `${result.reference} is up to date`}\n`,
        );
    }
    return 0;
  },
};
