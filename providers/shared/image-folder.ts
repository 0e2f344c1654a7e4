/** How a provider that keeps images as folders (Apptainer sandbox directories, the bwrap test provider) names them. */
import { GymError } from '../../core/errors.ts';

/**
 * The folder an image reference names (`/`, `:` and `@` become `_`). A name of dots only would
 * be the images folder itself or its parent (the host's work directory, with every sandbox's state
 * file), and one starting with a dot would hide among the partial and record files: refused.
 */
export function imageFolderName(reference: string): string {
  const name = reference.replace(/[/:@]/g, '_');
  if (name === '' || name.startsWith('.'))
    throw new GymError('VALIDATION_FAILED', `image reference "${reference}" cannot name an image folder`);
  return name;
}
