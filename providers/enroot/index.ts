/** The enroot provider's entry point: the registry imports this only when one is configured (it loads ssh2). */
import type { ProviderContext, SandboxProvider } from '../sandbox-provider.ts';
import { EnrootProvider } from './enroot-provider.ts';

export { EnrootProvider };

export function createEnrootProvider(options: unknown, context: ProviderContext): SandboxProvider {
  return new EnrootProvider(options, context);
}
