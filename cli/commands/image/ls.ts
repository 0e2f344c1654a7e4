import type { ImageList } from '../../../core/schemas/image.ts';
import type { CommandOf } from '../../command.ts';
import { resolveStateDir } from '../../connect.ts';
import { formatTable } from '../../format.ts';
import { connectOrStartInProcess } from '../../in-process-daemon.ts';
import type { imageLs } from './definitions.ts';

/** Lists through the daemon's provider (one started in-process when none runs), never an engine. */
export const imageLsCommand: CommandOf<typeof imageLs> = {
  async run({ options: values, env, stdout }) {
    const daemon = await connectOrStartInProcess({ stateDir: resolveStateDir(values.stateDir, env), env });
    let images: ImageList['images'];
    try {
      images = (
        await daemon.client.listImages(values.provider === undefined ? {} : { provider: values.provider })
      ).images;
    } finally {
      await daemon.close();
    }
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
          image.sizeBytes === undefined ? '-' : `${(image.sizeBytes / 1024 / 1024).toFixed(1)} MiB`,
          image.createdAt ?? '-',
        ]),
      ),
    );
    return 0;
  },
};
