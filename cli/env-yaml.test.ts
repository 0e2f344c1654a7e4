import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { readEnvYaml, resolveEnvYaml } from './env-yaml.ts';

describe("env.yaml with NeMo Gym's interpolation", () => {
  it('resolves ${oc.env:VAR}, its default, references to keys and a literal \\${', async () => {
    const directory = await mkdtemp(join(tmpdir(), 'gym-env-yaml-'));
    try {
      const path = join(directory, 'env.yaml');
      await writeFile(
        path,
        [
          'policy_base_url: http://${oc.env:MODEL_HOST}:${oc.env:MODEL_PORT, 8000}/v1',
          'policy_api_key: ${oc.env:NVIDIA_API_KEY}',
          "policy_model_name: ${oc.env:MODEL_NAME,'my model'}",
          'judge:',
          '  api_key: ${policy_api_key}',
          '  org: ${oc.env:JUDGE_ORG,null}',
          'note: costs \\${dollars}',
          'retries: 3',
        ].join('\n'),
      );
      const env = { MODEL_HOST: '127.0.0.1', NVIDIA_API_KEY: 'nvapi-secret' };
      expect(await readEnvYaml(path, env)).toEqual({
        policy_base_url: 'http://127.0.0.1:8000/v1',
        policy_api_key: 'nvapi-secret',
        policy_model_name: 'my model',
        judge: { api_key: 'nvapi-secret', org: null },
        note: 'costs ${dollars}',
        retries: 3,
      });
      await writeFile(path, '');
      expect(await readEnvYaml(path, env)).toEqual({});
    } finally {
      await rm(directory, { recursive: true, force: true });
    }
  });

  it('names the key whose variable is unset, whose resolver is unknown, or that refers to itself', () => {
    expect(() => resolveEnvYaml({ policy_api_key: '${oc.env:NVIDIA_API_KEY}' }, {})).toThrow(
      /env.yaml policy_api_key: the environment variable NVIDIA_API_KEY is not set/,
    );
    expect(() => resolveEnvYaml({ a: { b: 'x-${oc.decode:abc}' } }, {})).toThrow(
      /env.yaml a.b: the resolver oc.decode/,
    );
    expect(() => resolveEnvYaml({ a: '${b}', b: '${a}' }, {})).toThrow(/refers back to itself/);
    expect(() => resolveEnvYaml({ a: '${missing}' }, {})).toThrow(/env.yaml a: \$\{missing\} names no key/);
  });
});
