/** The apptainer provider's entry point: the registry imports this only when one is configured (it loads ssh2). */
import type { ProviderContext, SandboxProvider } from '../sandbox-provider.ts';
import { ApptainerProvider } from './apptainer-provider.ts';

export { ApptainerProvider };

export function createApptainerProvider(options: unknown, context: ProviderContext): SandboxProvider {
  return new ApptainerProvider(options, context);
}
