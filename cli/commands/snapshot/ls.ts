import type { CommandOf } from '../../command.ts';
import { connect, resolveStateDir } from '../../connect.ts';
import { formatTable } from '../../format.ts';
import type { snapshotLs } from './definitions.ts';

export const snapshotLsCommand: CommandOf<typeof snapshotLs> = {
  async run({ options: values, env, stdout }) {
    const snapshots = await (await connect(resolveStateDir(values.stateDir, env))).listSnapshots();
    if (values.json) {
      stdout.write(`${JSON.stringify(snapshots)}\n`);
      return 0;
    }
    stdout.write(
      formatTable(
        ['ID', 'PROVIDER', 'METHOD', 'SANDBOX', 'BASE IMAGE', 'SIZE', 'CREATED', 'EXPIRES'],
        snapshots.map((snapshot) => [
          snapshot.id,
          snapshot.provider,
          // A live snapshot holds memory and processes too (docs/snapshots.md).
          snapshot.live ? `${snapshot.method}+live` : snapshot.method,
          snapshot.sandboxId,
          snapshot.baseImage,
          snapshot.sizeBytes === null ? '' : `${Math.ceil(snapshot.sizeBytes / (1024 * 1024))} MiB`,
          snapshot.createdAt,
          snapshot.expiresAt,
        ]),
      ),
    );
    return 0;
  },
};
