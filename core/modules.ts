/**
 * Loads a plug-in factory (a provider, a harness) from a module path or package name. Both
 * registries use it, so a miss or a bad export reads the same everywhere.
 */
import { isAbsolute, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { type ErrorCode, GymError } from './errors.ts';

export interface LoadFactoryOptions {
  /** What the module provides, for messages ("provider", "harness"). */
  kind: string;
  /** The export names tried in order, e.g. `createProvider`, then `default`. */
  exportNames: string[];
  notFoundCode: ErrorCode;
  invalidCode: ErrorCode;
}

export async function loadFactory(
  specifier: string,
  baseDirectory: string,
  options: LoadFactoryOptions,
): Promise<unknown> {
  const isLocal = specifier.startsWith('.') || isAbsolute(specifier);
  const target = isLocal ? pathToFileURL(resolve(baseDirectory, specifier)).href : specifier;
  let loaded: Record<string, unknown>;
  try {
    loaded = (await import(target)) as Record<string, unknown>;
  } catch (error) {
    throw new GymError(
      options.notFoundCode,
      `cannot load ${options.kind} module "${specifier}": ${(error as Error).message}`,
      {
        details: { module: specifier },
        cause: error,
      },
    );
  }
  const factory = options.exportNames
    .map((name) => loaded[name])
    .find((candidate) => typeof candidate === 'function');
  if (factory === undefined) {
    throw new GymError(
      options.invalidCode,
      `${options.kind} module "${specifier}" must export a function \`${options.exportNames[0]}\``,
      {
        details: { module: specifier, exports: Object.keys(loaded) },
      },
    );
  }
  return factory;
}
