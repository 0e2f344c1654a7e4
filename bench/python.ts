/**
 * Session exec over HTTP from the Python client (`python/gym_sandboxd`) against the TypeScript
 * client, in one run, on one daemon in a process of its own (so neither client shares the
 * daemon's event loop). The two take turns in rounds, so load on the machine falls on both alike.
 * Prints one JSON line: each client's p50 and p99, and Python's p50 over TypeScript's (goal:
 * within 1.5x).
 *
 *   npm run bench:python        (BENCH_PYTHON_COUNT=200 execs per round, BENCH_PYTHON_ROUNDS=4)
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { imageReference } from '../images/build.ts';
import { findImageDefinition } from '../images/definitions.ts';
import { spawnDaemonProcess } from '../test/daemon-harness.ts';
import { percentile, round, timeSequential } from './stats.ts';

const count = Number(process.env.BENCH_PYTHON_COUNT ?? 200);
const rounds = Number(process.env.BENCH_PYTHON_ROUNDS ?? 4);
const warmup = 20;
const PYTHON = process.env.GYM_PYTHON ?? (existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3');
const PACKAGE = new URL('../python', import.meta.url).pathname;

// One round in Python: the same call as the TypeScript side (argv ["true"] in a session), timed
// around the client's method; prints the samples in milliseconds.
const PYTHON_ROUND = `
import json, sys, time, asyncio
from gym_sandboxd import GymClient, AsyncGymClient
sandbox_id, count, warmup, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
samples = []
if mode == "sync":
    with GymClient() as client:
        for index in range(warmup + count):
            started = time.perf_counter()
            client.exec(sandbox_id, ["true"], session="bench-python")
            if index >= warmup:
                samples.append((time.perf_counter() - started) * 1000)
else:
    async def main():
        async with AsyncGymClient() as client:
            for index in range(warmup + count):
                started = time.perf_counter()
                await client.exec(sandbox_id, ["true"], session="bench-python-async")
                if index >= warmup:
                    samples.append((time.perf_counter() - started) * 1000)
    asyncio.run(main())
print(json.dumps(samples))
`;

function pythonRound(stateDir: string, sandboxId: string, mode: 'sync' | 'async'): Promise<number[]> {
  return new Promise((resolve, reject) => {
    const child = spawn(PYTHON, ['-c', PYTHON_ROUND, sandboxId, String(count), String(warmup), mode], {
      env: { ...process.env, GYM_STATE_DIR: stateDir, PYTHONPATH: PACKAGE },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    child.on('error', reject);
    child.on('close', (code) =>
      code === 0 ? resolve(JSON.parse(output) as number[]) : reject(new Error(`python exited ${code}`)),
    );
  });
}

const stateDir = await mkdtemp(join(tmpdir(), 'gym-bench-python-'));
const configPath = join(stateDir, 'config.yaml');
await writeFile(
  configPath,
  [
    `stateDir: ${stateDir}`,
    'namespace: bench-python',
    'logLevel: warn',
    'destroyOnShutdown: true',
    'listen:',
    '  host: 127.0.0.1',
    '  port: 0',
  ].join('\n'),
);
const { child, client } = await spawnDaemonProcess(configPath, stateDir);
try {
  const image = await imageReference(findImageDefinition('busybox')!);
  const sandbox = await client.createSandbox({ image, ttlSeconds: 600 });
  process.stderr.write(`bench:python: ${rounds} rounds of ${count} session execs per client\n`);
  const typescript: number[] = [];
  const python: number[] = [];
  const pythonAsync: number[] = [];
  for (let round = 0; round < rounds; round += 1) {
    typescript.push(
      ...(await timeSequential(count, warmup, () =>
        client.exec(sandbox.id, { argv: ['true'], session: 'bench-typescript' }),
      )),
    );
    python.push(...(await pythonRound(stateDir, sandbox.id, 'sync')));
    pythonAsync.push(...(await pythonRound(stateDir, sandbox.id, 'async')));
  }
  await client.destroySandbox(sandbox.id);
  const typescriptP50 = percentile(typescript, 0.5);
  console.log(
    JSON.stringify({
      bench: 'python',
      count: count * rounds,
      typescriptSessionExecP50Ms: round(typescriptP50),
      typescriptSessionExecP99Ms: round(percentile(typescript, 0.99)),
      pythonSessionExecP50Ms: round(percentile(python, 0.5)),
      pythonSessionExecP99Ms: round(percentile(python, 0.99)),
      pythonAsyncSessionExecP50Ms: round(percentile(pythonAsync, 0.5)),
      pythonAsyncSessionExecP99Ms: round(percentile(pythonAsync, 0.99)),
      pythonOverTypescriptP50: round(percentile(python, 0.5) / typescriptP50, 2),
      pythonAsyncOverTypescriptP50: round(percentile(pythonAsync, 0.5) / typescriptP50, 2),
    }),
  );
} finally {
  child.kill('SIGTERM');
  await new Promise((resolve) => child.once('exit', resolve));
  await rm(stateDir, { recursive: true, force: true });
}
