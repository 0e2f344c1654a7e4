/**
 * Image sets that environments need, by the name `gym image build <set>` takes. Each set's
 * builder lives with its environment; the daemon's provider builds the images.
 */
import { SWE_MINI_IMAGE_SET } from '../environments/swe-mini/images.ts';

export { buildSweMiniImages, type ImagePreparer } from '../environments/swe-mini/images.ts';

export const IMAGE_SETS = [SWE_MINI_IMAGE_SET] as const;
