/**
 * What the tree knows of one built-in provider, in one row its own folder exports
 * (`<provider>/registration.ts`) and `registry.ts` lists: its name, how it is built, what it needs
 * of the daemon's host and how `gym doctor` speaks of it. A row is data and loaders only: the
 * provider's module (and its SDK) and its host checks are imported when first used, so a process
 * that never builds a provider never loads its SDK, and reading the rows loads none.
 */
import type { HostCheck, HostCheckContext } from '../core/host-check.ts';
import type { SandboxProviderFactory } from './sandbox-provider.ts';

export interface BuiltInProvider {
  /** The name specs, the config and the API know it by. */
  name: string;
  /** Its name in prose (`Docker`), as `gym doctor --help` writes it. */
  title: string;
  /** What it needs of the daemon's host, as `gym doctor --help` says it. */
  hostNeeds: string;
  /** Builds the provider, importing its module on the first call. */
  create: SandboxProviderFactory;
  /** `gym doctor`'s checks of the host for it, with its options as configured. */
  hostChecks(context: HostCheckContext): Promise<HostCheck[]>;
  /** The fix `gym doctor` prints when its backend does not answer (default: see the daemon log). */
  unhealthyFix?: string;
}
