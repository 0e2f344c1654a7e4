import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { VERSION } from '../core/version.ts';
import packageJson from '../package.json' with { type: 'json' };
import { configFromEnvironment, loadConfig } from './config.ts';

const directories: string[] = [];
afterEach(async () => {
  await Promise.all(
    directories.splice(0).map((directory) => rm(directory, { recursive: true, force: true })),
  );
});

async function configFile(text: string): Promise<string> {
  const directory = await mkdtemp(join(tmpdir(), 'gym-config-'));
  directories.push(directory);
  const path = join(directory, 'gym.yaml');
  await writeFile(path, text);
  return path;
}

describe('daemon config', () => {
  it('fills defaults: loopback, docker, one-hour TTL', async () => {
    const config = await loadConfig({ env: { HOME: '/home/someone' } });
    expect(config).toMatchObject({
      listen: { host: '127.0.0.1', port: 7380 },
      providers: [{ name: 'docker', maxLiveSandboxes: 1000 }],
      defaultTtlSeconds: 3600,
      namespace: 'default',
    });
    expect(Object.isFrozen(config)).toBe(true);
  });

  it('reads YAML, resolves paths against the file, and lets environment then flags override', async () => {
    const path = await configFile(
      'stateDir: ./state\nlisten:\n  port: 9000\nproviders:\n  - name: docker\n    maxLiveSandboxes: 20\n',
    );
    const config = await loadConfig({
      configPath: path,
      env: {},
      overrides: [configFromEnvironment({ GYM_PORT: '9100', GYM_NAMESPACE: 'ci' }), { namespace: 'flagged' }],
    });
    expect(config.stateDir).toBe(join(path, '..', 'state'));
    expect(config.listen.port).toBe(9100);
    expect(config.namespace).toBe('flagged');
    expect(config.providers[0]?.maxLiveSandboxes).toBe(20);
  });

  it('names the bad key', async () => {
    const path = await configFile(
      'providers:\n  - name: docker\n    maxLiveSandboxes: -3\nreaperIntervalMs: soon\n',
    );
    const error = await loadConfig({ configPath: path, env: {} }).catch((caught: unknown) => caught as Error);
    expect(error).toMatchObject({ code: 'VALIDATION_FAILED' });
    expect((error as Error).message).toContain('providers.0.maxLiveSandboxes');
    expect((error as Error).message).toContain('reaperIntervalMs');
    const unknownKey = await loadConfig({ configPath: await configFile('listne: {}\n'), env: {} }).catch(
      (caught: unknown) => caught as Error,
    );
    expect((unknownKey as Error).message).toContain('listne');
  });

  it('refuses YAML that does not parse, and a default provider that is not configured', async () => {
    await expect(
      loadConfig({ configPath: await configFile('a: [unclosed\n'), env: {} }),
    ).rejects.toMatchObject({ code: 'VALIDATION_FAILED' });
    await expect(loadConfig({ env: {}, overrides: [{ defaultProvider: 'kubernetes' }] })).rejects.toThrow(
      /defaultProvider "kubernetes"/,
    );
  });

  it('keeps the version in step with package.json', () => {
    expect(VERSION).toBe(packageJson.version);
  });
});
