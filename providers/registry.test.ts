import { tmpdir } from 'node:os';
import { describe, expect, it } from 'vitest';
import { systemClock } from '../core/clock.ts';
import { GymError } from '../core/errors.ts';
import { silentLogger } from '../core/logger.ts';
import { ProviderRegistry, REQUIRED_METHODS } from './registry.ts';
import type { ProviderContext } from './sandbox-provider.ts';

const context: ProviderContext = {
  namespace: 'unit',
  daemonId: 'daemon-unit',
  logger: silentLogger,
  clock: systemClock,
  maxLifetimeSeconds: 60,
  stateDirectory: tmpdir(),
};

async function failure(promise: Promise<unknown>): Promise<GymError> {
  const error = await promise.then(
    () => null,
    (caught: unknown) => caught,
  );
  expect(error).toBeInstanceOf(GymError);
  return error as GymError;
}

describe('ProviderRegistry', () => {
  it('names the available providers on a miss', async () => {
    const error = await failure(new ProviderRegistry().create({ name: 'dokcer' }, context));
    expect(error.code).toBe('PROVIDER_NOT_FOUND');
    expect(error.message).toContain('available: apptainer, docker, enroot, kubernetes');
    expect(error.details.available).toEqual(['apptainer', 'docker', 'enroot', 'kubernetes']);
  });

  it('builds the Docker provider by name', async () => {
    const provider = await new ProviderRegistry().create(
      { name: 'docker', options: { socketPath: '/nonexistent.sock' } },
      context,
    );
    expect(provider.name).toBe('docker');
    expect(provider.capabilities.sessions).toBe(true);
    await provider.close();
  });

  it('refuses bad Docker options with the key named', async () => {
    const error = await failure(
      new ProviderRegistry().create({ name: 'docker', options: { sokcetPath: '/x' } }, context),
    );
    expect(error.code).toBe('VALIDATION_FAILED');
    expect(error.message).toMatch(/sokcetPath|unrecognized/i);
  });

  it('loads a third-party provider from a module path relative to the base directory', async () => {
    const registry = new ProviderRegistry();
    const provider = (await registry.create(
      { name: 'fake', module: './fixtures/fake-provider.ts', options: { region: 'here' } },
      context,
      new URL('../test', import.meta.url).pathname,
    )) as unknown as { name: string; options: unknown; namespace: string };
    expect(provider).toMatchObject({ name: 'fake', options: { region: 'here' }, namespace: 'unit' });
    expect(registry.names).toEqual(['apptainer', 'docker', 'enroot', 'fake', 'kubernetes']);
  });

  it('explains a module that cannot be loaded or exports no factory', async () => {
    const base = new URL('../test', import.meta.url).pathname;
    const missing = await failure(
      new ProviderRegistry().create({ name: 'x', module: './fixtures/nope.ts' }, context, base),
    );
    expect(missing.code).toBe('PROVIDER_NOT_FOUND');
    expect(missing.message).toContain('./fixtures/nope.ts');
    const invalid = await failure(
      new ProviderRegistry().create({ name: 'x', module: './fixtures/not-a-provider.ts' }, context, base),
    );
    expect(invalid.code).toBe('PROVIDER_INVALID');
    expect(invalid.message).toContain('createProvider');
  });

  it('refuses a provider written against another version of the contract, naming both versions', async () => {
    const registry = new ProviderRegistry({});
    const methods = Object.fromEntries(REQUIRED_METHODS.map((method) => [method, () => undefined]));
    registry.register(
      'future',
      async () => ({ ...methods, name: 'future', specificationVersion: 2 }) as never,
    );
    registry.register(
      'current',
      async () => ({ ...methods, name: 'current', specificationVersion: 1 }) as never,
    );
    const error = await failure(registry.create({ name: 'future' }, context));
    expect(error.code).toBe('PROVIDER_INVALID');
    expect(error.message).toContain('version 2');
    expect(error.details).toMatchObject({ specificationVersion: 2, supported: 1 });
    expect((await registry.create({ name: 'current' }, context)).name).toBe('current');
  });
});
