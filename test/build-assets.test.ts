import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { runtimeAssets } from '../scripts/copy-assets.ts';

describe('npm run build copies what the code reads at run time', () => {
  it('lists the viewer and /ui pages and the environments data, and no TypeScript', async () => {
    const assets = await runtimeAssets(fileURLToPath(new URL('..', import.meta.url)));
    expect(assets).toEqual(
      expect.arrayContaining([
        'cli/viewer/static/index.html',
        'cli/viewer/static/viewer.js',
        'daemon/ui/index.html',
        'environments/mcqa/data/example.jsonl',
      ]),
    );
    expect(assets.filter((asset) => asset.endsWith('.ts'))).toEqual([]);
  });
});
