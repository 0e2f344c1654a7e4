import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { runCli } from '../../program.ts';

let directory: string | undefined;
afterEach(async () => {
  if (directory !== undefined) await rm(directory, { recursive: true, force: true });
  directory = undefined;
});

describe('gym eval profile', () => {
  it('shows - for tasks whose rows carry no id (it printed ID undefined), and the id where there is one', async () => {
    directory = await mkdtemp(join(tmpdir(), 'gym-profile-'));
    const input = join(directory, 'rollouts.jsonl');
    const rollouts = [
      { _ng_task_index: 0, _ng_rollout_index: 0, reward: 1 },
      { _ng_task_index: 0, _ng_rollout_index: 1, reward: 0 },
      { _ng_task_index: 1, _ng_rollout_index: 0, reward: 1, instance_id: 'repo__name-1' },
    ];
    await writeFile(input, rollouts.map((row) => `${JSON.stringify(row)}\n`).join(''));
    const stdout = new PassThrough();
    let printed = '';
    stdout.on('data', (chunk: Buffer) => {
      printed += chunk.toString();
    });
    expect(
      await runCli(['eval', 'profile', '-i', input], { stdout, stderr: new PassThrough(), env: {} }),
    ).toBe(0);
    expect(printed).not.toContain('undefined');
    const [, first, second] = printed.split('\n');
    // Rollouts as NeMo Gym counts them: those the task has, of those it was to have.
    expect(first?.split(/\s+/).slice(0, 4)).toEqual(['0', '-', '2/2', '0.50']);
    expect(second?.split(/\s+/).slice(0, 4)).toEqual(['1', 'repo__name-1', '1/1', '1.00']);
    const written = (await readFile(join(directory, 'rollouts_reward_profiling.jsonl'), 'utf8'))
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as Record<string, unknown>);
    // NeMo Gym's profile line: the row a task was run from is its `sample`, ids and all.
    expect(written[0]?.sample).not.toHaveProperty('instance_id');
    expect(written[1]).toMatchObject({ sample: { instance_id: 'repo__name-1' } });
  });
});
