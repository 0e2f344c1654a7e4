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

/** A provider's row (`registration.ts`: its name and loaders, no code of it) loads with the registry. */
const isRow = (url: string) => /\/providers\/[^/]+\/registration\.ts$/.test(url);
const isDockerModule = (url: string) =>
  /\/node_modules\/dockerode\/|\/providers\/docker\//.test(url) && !isRow(url);
const isKubernetesModule = (url: string) =>
  /\/node_modules\/@kubernetes\/client-node\/|\/providers\/kubernetes\//.test(url) && !isRow(url);

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
    // The Kubernetes client loads only for a Kubernetes provider, not for Docker or another.
    expect(withDocker.filter(isKubernetesModule)).toEqual([]);
  }, 40_000);
});

const libraryUrl = new URL('../index.ts', import.meta.url).href;
const dockerSubpathUrl = new URL('./docker/index.ts', import.meta.url).href;
/** Imports the library root, then the Docker subpath, printing what each loaded. */
const libraryScript = `${RECORD_MODULES}
const library = await import(${JSON.stringify(libraryUrl)});
const withRoot = [...loaded];
const docker = await import(${JSON.stringify(dockerSubpathUrl)});
console.log(JSON.stringify({ exports: Object.keys(library), withRoot, withDocker: [...loaded], dockerExports: Object.keys(docker) }));
`;

describe('lazy loading of the library root', () => {
  it('imports the package root without dockerode; the Docker subpath loads it', async () => {
    const { stdout } = await promisify(execFile)(
      process.execPath,
      ['--input-type=module', '--eval', libraryScript],
      { timeout: 30_000 },
    );
    const result = JSON.parse(stdout.trim().split('\n').pop()!) as {
      exports: string[];
      withRoot: string[];
      withDocker: string[];
      dockerExports: string[];
    };
    expect(result.exports).toEqual(
      expect.arrayContaining(['ProviderRegistry', 'GymError', 'SandboxSpecSchema']),
    );
    expect(result.withRoot.filter(isDockerModule)).toEqual([]);
    expect(result.withRoot.filter(isKubernetesModule)).toEqual([]);
    expect(result.withDocker.some((url) => url.includes('/node_modules/dockerode/'))).toBe(true);
    expect(result.dockerExports).toEqual(
      expect.arrayContaining(['DockerProvider', 'createDockerClient', 'createDockerProvider']),
    );
  }, 40_000);
});

const mainUrl = new URL('../cli/main.ts', import.meta.url).href;
/** The CLI as `gym ARGS...`: prints its output, then every module it loaded, as the last line. */
const cliScript = (
  args: string[],
) => `${RECORD_MODULES}process.argv = [process.argv[0], 'gym', ...${JSON.stringify(args)}];
await import(${JSON.stringify(mainUrl)});
console.log(JSON.stringify([...loaded]));
`;

async function runCliRecording(args: string[]): Promise<{ output: string[]; loaded: string[] }> {
  const { stdout } = await promisify(execFile)(
    process.execPath,
    ['--input-type=module', '--eval', cliScript(args)],
    { timeout: 30_000 },
  ).catch((error: { stdout?: string }) => ({ stdout: error.stdout ?? '' }));
  const lines = stdout.trim().split('\n');
  return { loaded: JSON.parse(lines.pop()!) as string[], output: lines };
}

/** A command's body; each folder's parsers (`definitions.ts`, `index.ts`) load with the program. */
const isCommandModule = (url: string) =>
  /\/cli\/commands\//.test(url) && !/\/cli\/commands\/[^/]+\/(definitions|index)\.ts$/.test(url);

describe('lazy loading of CLI commands', () => {
  it('shows `gym daemon start --help` without loading any command body', async () => {
    const { output, loaded } = await runCliRecording(['daemon', 'start', '--help']);
    expect(output[0]).toMatch(/^Usage: gym daemon start/);
    expect(output.join('\n')).toContain('--destroy-on-shutdown');
    expect(loaded.filter(isCommandModule)).toEqual([]);
    expect(loaded.filter(isDockerModule)).toEqual([]);
  }, 40_000);

  it('runs `gym daemon start` without loading the image commands, and so without dockerode', async () => {
    // A config file that does not exist: the command body loads and runs, then fails at once.
    const { loaded } = await runCliRecording(['daemon', 'start', '--config', '/nonexistent/gym.yaml']);
    expect(loaded.some((url) => url.endsWith('/cli/commands/daemon/start.ts'))).toBe(true);
    expect(loaded.filter(isCommandModule)).toEqual([
      expect.stringMatching(/\/cli\/commands\/daemon\/start\.ts$/),
    ]);
    expect(loaded.filter(isDockerModule)).toEqual([]);
  }, 40_000);
});
