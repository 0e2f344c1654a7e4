import { access } from 'node:fs/promises';
import { GymError } from '../../../core/errors.ts';
import type { CommandOf } from '../../command.ts';
import { buildViewerServer } from '../../viewer/server.ts';
import type { evalView } from './definitions.ts';

/**
 * `gym eval view RESULTS.jsonl`: serves the viewer on 127.0.0.1 until interrupted. The login URL
 * is printed on stdout only, once: it is the only way in, and it works once.
 */
export const evalViewCommand: CommandOf<typeof evalView> = {
  async run({ options: values, args: [resultsPath], stdout }) {
    await access(resultsPath).catch((error: Error) => {
      throw new GymError('VALIDATION_FAILED', `cannot read ${resultsPath}: ${error.message}`);
    });
    const viewer = await buildViewerServer({ resultsPath });
    const origin = await viewer.listen(values.port);
    stdout.write(`viewing ${resultsPath}\nopen ${origin}${viewer.loginPath}\n(the link works once)\n`);
    await new Promise<void>((resolve) => {
      process.once('SIGINT', resolve);
      process.once('SIGTERM', resolve);
    });
    await viewer.app.close();
    return 0;
  },
};
