/**
 * Finds a provider factory by name: a built-in one, or a third-party module given by path or
 * package name. A miss names what is available, so a typo is a one-line fix.
 */
import { GymError } from '../core/errors.ts';
import { loadFactory } from '../core/modules.ts';
import { apptainerRegistration } from './apptainer/registration.ts';
import type { BuiltInProvider } from './built-in-provider.ts';
import { dockerRegistration } from './docker/registration.ts';
import { enrootRegistration } from './enroot/registration.ts';
import { kubernetesRegistration } from './kubernetes/registration.ts';
import {
  PROVIDER_SPECIFICATION_VERSION,
  type ProviderContext,
  type SandboxProvider,
  type SandboxProviderFactory,
} from './sandbox-provider.ts';

export type { BuiltInProvider } from './built-in-provider.ts';

/**
 * The built-in providers, one row each, in the order `gym doctor --help` names them. A row is
 * its folder's `registration.ts`: a new built-in provider is its folder and one line here. Each
 * provider's module loads only when a daemon builds it: a provider's SDK (dockerode, a
 * Kubernetes client, ssh2) is large, and a process that does not use it never loads it.
 */
export const BUILT_IN_PROVIDER_ROWS: readonly BuiltInProvider[] = Object.freeze([
  dockerRegistration,
  kubernetesRegistration,
  apptainerRegistration,
  enrootRegistration,
]);

/** The built-in providers' factories by name (what a registry starts with). */
export const BUILT_IN_PROVIDERS: Readonly<Record<string, SandboxProviderFactory>> = Object.freeze(
  Object.fromEntries(BUILT_IN_PROVIDER_ROWS.map((row) => [row.name, row.create])),
);

/** A configured provider's row: a built-in one's; none for a third-party module, whatever its name. */
export function builtInProviderOf(
  registration: Pick<ProviderRegistration, 'name' | 'module'>,
): BuiltInProvider | undefined {
  return registration.module === undefined
    ? BUILT_IN_PROVIDER_ROWS.find((row) => row.name === registration.name)
    : undefined;
}

/** The methods every provider must have; checked when a third-party module is loaded. */
export const REQUIRED_METHODS = [
  'health',
  'create',
  'get',
  'list',
  'exec',
  'writeFile',
  'readFile',
  'writeArchive',
  'readArchive',
  'destroy',
  'close',
] as const;

export interface ProviderRegistration {
  /** The name the provider is known by in specs and the API. */
  name: string;
  /** A module path (absolute, or relative to `baseDirectory`) or package name; absent for built-ins. */
  module?: string;
  /** Passed to the factory as it is; each provider validates its own. */
  options?: unknown;
}

export class ProviderRegistry {
  readonly #factories: Map<string, SandboxProviderFactory>;

  constructor(factories: Readonly<Record<string, SandboxProviderFactory>> = BUILT_IN_PROVIDERS) {
    this.#factories = new Map(Object.entries(factories));
  }

  get names(): string[] {
    return [...this.#factories.keys()].sort();
  }

  register(name: string, factory: SandboxProviderFactory): void {
    this.#factories.set(name, factory);
  }

  factory(name: string): SandboxProviderFactory {
    const factory = this.#factories.get(name);
    if (factory === undefined) {
      throw new GymError(
        'PROVIDER_NOT_FOUND',
        `no provider named "${name}"; available: ${this.names.join(', ') || '(none)'}; a third-party provider is loaded with \`module: <path>\` in the config`,
        { details: { provider: name, available: this.names } },
      );
    }
    return factory;
  }

  /** Loads `registration.module` if given (registering it under its name), then builds the provider. */
  async create(
    registration: ProviderRegistration,
    context: ProviderContext,
    baseDirectory = process.cwd(),
  ): Promise<SandboxProvider> {
    if (registration.module !== undefined) {
      this.register(registration.name, await loadProviderModule(registration.module, baseDirectory));
    }
    const provider = await this.factory(registration.name)(registration.options ?? {}, context);
    assertIsProvider(provider, registration.name);
    return provider;
  }
}

/** Imports a provider module; it must export `createProvider` (or a default) as a factory function. */
export async function loadProviderModule(
  specifier: string,
  baseDirectory: string,
): Promise<SandboxProviderFactory> {
  return (await loadFactory(specifier, baseDirectory, {
    kind: 'provider',
    exportNames: ['createProvider', 'default'],
    notFoundCode: 'PROVIDER_NOT_FOUND',
    invalidCode: 'PROVIDER_INVALID',
  })) as SandboxProviderFactory;
}

function assertIsProvider(candidate: unknown, name: string): asserts candidate is SandboxProvider {
  const missing = REQUIRED_METHODS.filter(
    (method) => typeof (candidate as Record<string, unknown> | null)?.[method] !== 'function',
  );
  if (missing.length > 0) {
    throw new GymError(
      'PROVIDER_INVALID',
      `provider "${name}" is missing required methods: ${missing.join(', ')}`,
      {
        details: { provider: name, missing },
      },
    );
  }
  const version = (candidate as { specificationVersion?: unknown }).specificationVersion;
  if (version !== undefined && version !== PROVIDER_SPECIFICATION_VERSION) {
    throw new GymError(
      'PROVIDER_INVALID',
      `provider "${name}" implements provider contract version ${String(version)}; this daemon speaks version ${PROVIDER_SPECIFICATION_VERSION}`,
      {
        details: { provider: name, specificationVersion: version, supported: PROVIDER_SPECIFICATION_VERSION },
      },
    );
  }
}
