import { parseArgs } from 'node:util';
import { ImageBuilder } from '../../../images/build.ts';
import { createDockerClient } from '../../../providers/docker/index.ts';
import type { Command } from '../../command.ts';
import { formatTable } from '../../format.ts';

export const imageLsCommand: Command = {
  summary: 'list the images gym built',
  usage: 'gym image ls [--json]',
  async run({ args, stdout, logger }) {
    const { values } = parseArgs({ args, options: { json: { type: 'boolean', default: false } } });
    const images = await new ImageBuilder(createDockerClient(), logger).list();
    if (values.json) {
      stdout.write(`${JSON.stringify(images)}\n`);
      return 0;
    }
    stdout.write(
      formatTable(
        ['REFERENCE', 'DEFINITION', 'SIZE', 'CREATED'],
        images.map((image) => [
          image.reference,
          image.definition,
          `${(image.sizeBytes / 1024 / 1024).toFixed(1)} MiB`,
          image.createdAt,
        ]),
      ),
    );
    return 0;
  },
};
