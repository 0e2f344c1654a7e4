import { GymError } from '../../../core/errors.ts';
import type { ImageProgress, PreparedImage } from '../../../core/schemas/image.ts';
import { IMAGE_DEFINITIONS } from '../../../images/definitions.ts';
import { type CommandOf, UsageError } from '../../command.ts';
import { resolveStateDir } from '../../connect.ts';
import { connectOrStartInProcess } from '../../in-process-daemon.ts';
import { formatDuration, leftText, startTicker, Timings } from '../../progress.ts';
import { buildSweMiniImages, IMAGE_SETS } from '../../task-images.ts';
import { buildDockerfileContext } from './build-dockerfile.ts';
import type { imageBuild } from './definitions.ts';

/** Builds on the daemon's provider (one started in-process when none runs), never on an engine. */
export const imageBuildCommand: CommandOf<typeof imageBuild> = {
  async run({ options: values, args: [positionals], env, stdout, stderr, logger }) {
    if (values.context !== undefined) {
      if (positionals.length > 0 || values.force === true)
        throw new UsageError('--context builds one Dockerfile: give no image names and no --force');
      const daemon = await connectOrStartInProcess({ stateDir: resolveStateDir(values.stateDir, env), env });
      try {
        const result = await buildDockerfileContext(
          daemon.client,
          {
            context: values.context,
            name: values.name,
            timeoutSeconds: values.timeoutSeconds,
            provider: values.provider,
            env,
          },
          logger,
        );
        stdout.write(
          values.json
            ? `${JSON.stringify(result)}\n`
            : `${result.built ? `built ${result.reference} in ${(result.durationMs / 1000).toFixed(1)} s` : `${result.reference} is up to date`}\n`,
        );
      } finally {
        await daemon.close();
      }
      return 0;
    }
    if (values.name !== undefined || values.timeoutSeconds !== undefined)
      throw new UsageError('--name and --timeout-seconds go with --context');
    const names =
      positionals.length > 0 ? positionals : IMAGE_DEFINITIONS.map((definition) => definition.name);
    const known: string[] = [...IMAGE_DEFINITIONS.map((item) => item.name), ...IMAGE_SETS];
    for (const name of names) {
      if (!known.includes(name)) {
        throw new GymError(
          'VALIDATION_FAILED',
          `no image definition or set named "${name}"; available: ${known.join(', ')}`,
        );
      }
    }
    const print = (result: PreparedImage) => {
      // On a terminal the progress line is on screen: clear it first (the ticker redraws it).
      if (stderr.isTTY) stderr.write('\r\x1b[2K');
      if (values.json) stdout.write(`${JSON.stringify(result)}\n`);
      else
        stdout.write(
          `${result.built ? `built ${result.reference} in ${(result.durationMs / 1000).toFixed(1)} s` : `${result.reference} is up to date`}\n`,
        );
    };
    const stateDir = resolveStateDir(values.stateDir, env);
    // The last build's time on this machine is the estimate of the next (debootstrap: a minute).
    const timings = new Timings(stateDir);
    const provider = values.provider === undefined ? {} : { provider: values.provider };
    const daemon = await connectOrStartInProcess({ stateDir, env });
    try {
      for (const name of names) {
        if (!values.json) stdout.write(`building ${name} ...\n`);
        const key = `image ${name}`;
        const estimateMs = await timings.get(key);
        // The daemon streams each step (the root filesystem made, handed to the provider, ...).
        let step = '';
        const onProgress = (progress: ImageProgress) => {
          step = progress.message;
        };
        const ticker = startTicker(stderr, (elapsedMs) =>
          [
            `building ${name}${step === '' ? '' : ` (${step})`}: ${formatDuration(elapsedMs)}`,
            leftText(elapsedMs, estimateMs),
          ]
            .filter(Boolean)
            .join(', '),
        );
        const started = Date.now();
        let built = false;
        try {
          if (name === 'swe-mini') {
            await buildSweMiniImages(
              {
                prepareImage: (request) =>
                  daemon.client.prepareImage({ ...request, ...provider }, { onProgress }),
              },
              (reference, isBuilt) => {
                built ||= isBuilt;
                print({ name, reference, built: isBuilt, durationMs: 0 });
              },
            );
          } else {
            const response = await daemon.client.prepareImage(
              {
                kind: 'definition',
                name,
                force: values.force === true,
                ...provider,
              },
              { onProgress },
            );
            for (const result of response.images) {
              built ||= result.built;
              print(result);
            }
          }
        } finally {
          ticker.stop();
        }
        if (built) await timings.record(key, Date.now() - started);
      }
    } finally {
      await daemon.close();
    }
    return 0;
  },
};
