import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const harnessUrl = new URL('../test/daemon-harness.ts', import.meta.url).href;
const memoryUrl = new URL('../test/fixtures/memory-provider.ts', import.meta.url).href;
const registryUrl = new URL('./registry.ts', import.meta.url).href;
const coreUrls = {
  clock: new URL('../core/clock.ts', import.meta.url).href,
  logger: new URL('../core/logger.ts', import.meta.url).href,
};

/** The head of each script below: records in `loaded` every module the process resolves. */
const RECORD_MODULES = `
import { registerHooks } from 'node:module';
const loaded = new Set();
registerHooks({
  resolve(specifier, context, nextResolve) {
    const resolved = nextResolve(specifier, context);
    loaded.add(resolved.url);
    return resolved;
  },
});
`;

/**
 * Runs in a fresh Node process (a test runner's own module graph would hide what loads): records
 * every module resolved while a daemon of the memory provider starts and stops, then while the
 * registry builds a Docker provider, and prints both lists.
 */
const script = `${RECORD_MODULES}
const { tmpdir } = await import('node:os');
const { startTestDaemon } = await import(${JSON.stringify(harnessUrl)});
const { MemoryProvider } = await import(${JSON.stringify(memoryUrl)});
const daemon = await startTestDaemon(
  { providers: [{ name: 'memory' }] },
  { factories: { memory: (_options, context) => new MemoryProvider(context) } },
);
await daemon.cleanup();
const withMemory = [...loaded];
const { ProviderRegistry } = await import(${JSON.stringify(registryUrl)});
const { systemClock } = await import(${JSON.stringify(coreUrls.clock)});
const { silentLogger } = await import(${JSON.stringify(coreUrls.logger)});
const docker = await new ProviderRegistry().create(
  { name: 'docker', options: { socketPath: '/nonexistent.sock' } },
  { namespace: 'lazy', daemonId: 'daemon-lazy', logger: silentLogger, clock: systemClock, maxLifetimeSeconds: 60, stateDirectory: tmpdir() },
);
await docker.close();
console.log(JSON.stringify({ withMemory, withDocker: [...loaded] }));
`;

const isDockerModule = (url: string) => /\/node_modules\/dockerode\/|\/providers\/docker\//.test(url);

describe('lazy loading of built-in providers', () => {
  it('starts a daemon of another provider without loading dockerode; loads it for a Docker provider', async () => {
    const { stdout } = await promisify(execFile)(
      process.execPath,
      ['--input-type=module', '--eval', script],
      { timeout: 30_000 },
    );
    const { withMemory, withDocker } = JSON.parse(stdout.trim().split('\n').pop()!) as {
      withMemory: string[];
      withDocker: string[];
    };
    expect(withMemory.some((url) => url.endsWith('/daemon/daemon.ts'))).toBe(true);
    expect(withMemory.filter(isDockerModule)).toEqual([]);
    expect(withDocker.some((url) => url.includes('/node_modules/dockerode/'))).toBe(true);
  }, 40_000);
});

const mainUrl = new URL('../cli/main.ts', import.meta.url).href;
/** The CLI as `gym daemon start --help`: only that command's module (and what it needs) loads. */
const cliScript = `${RECORD_MODULES}process.argv = [process.argv[0], 'gym', 'daemon', 'start', '--help'];
await import(${JSON.stringify(mainUrl)});
console.log(JSON.stringify([...loaded]));
`;

describe('lazy loading of CLI commands', () => {
  it('runs `gym daemon start` without loading the image commands, and so without dockerode', async () => {
    const { stdout } = await promisify(execFile)(
      process.execPath,
      ['--input-type=module', '--eval', cliScript],
      { timeout: 30_000 },
    );
    const lines = stdout.trim().split('\n');
    expect(lines[0]).toMatch(/^usage: gym daemon start/);
    const loaded = JSON.parse(lines.pop()!) as string[];
    expect(loaded.some((url) => url.endsWith('/cli/commands/daemon/start.ts'))).toBe(true);
    expect(loaded.filter((url) => /\/cli\/commands\/(image|doctor|eval)\//.test(url))).toEqual([]);
    expect(loaded.filter(isDockerModule)).toEqual([]);
  }, 40_000);
});
