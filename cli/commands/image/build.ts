import { parseArgs } from 'node:util';
import { GymError } from '../../../core/errors.ts';
import { ImageBuilder } from '../../../images/build.ts';
import { findImageDefinition, IMAGE_DEFINITIONS } from '../../../images/definitions.ts';
import { createDockerClient } from '../../../providers/docker/index.ts';
import type { Command } from '../../command.ts';

export const imageBuildCommand: Command = {
  summary: 'build the local base images (no registry needed)',
  usage: `gym image build [NAME...] [--force] [--json]

Builds the named images (default: all of ${IMAGE_DEFINITIONS.map((definition) => definition.name).join(', ')}).
An image whose recipe hash already exists is not rebuilt unless --force is given.`,
  async run({ args, stdout, logger }) {
    const { values, positionals } = parseArgs({
      args,
      allowPositionals: true,
      options: { force: { type: 'boolean', default: false }, json: { type: 'boolean', default: false } },
    });
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
