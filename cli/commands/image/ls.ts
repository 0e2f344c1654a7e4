import { ImageBuilder } from '../../../images/build.ts';
import { createDockerClient } from '../../../providers/docker/index.ts';
import type { CommandOf } from '../../command.ts';
import { formatTable } from '../../format.ts';
import type { imageLs } from '../../program.ts';

export const imageLsCommand: CommandOf<typeof imageLs> = {
  async run({ options: values, stdout, logger }) {
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
