import { describe, expect, it } from 'vitest';
import { GymError } from '../errors.ts';
import { parseOrThrow } from '../validate.ts';
import { LABEL_VALUE_PATTERN, toLabelValue } from './common.ts';
import { ExecRequestSchema } from './exec.ts';
import { PoolNameSchema } from './pool.ts';
import { SandboxSpecSchema } from './sandbox.ts';

function validationError(run: () => unknown): GymError {
  try {
    run();
  } catch (error) {
    expect(error).toBeInstanceOf(GymError);
    expect((error as GymError).code).toBe('VALIDATION_FAILED');
    return error as GymError;
  }
  throw new Error('expected a validation error');
}

describe('SandboxSpec', () => {
  it('fills defaults: no network, an hour of lease, no limits', () => {
    const spec = parseOrThrow(SandboxSpecSchema, { image: 'gym/busybox:latest' }, 'spec');
    expect(spec).toMatchObject({
      network: 'none',
      ttlSeconds: 3600,
      env: {},
      labels: {},
      files: [],
      resources: {},
    });
  });

  it('names the field of a negative memory limit', () => {
    const error = validationError(() =>
      parseOrThrow(SandboxSpecSchema, { image: 'x', resources: { memoryMiB: -5 } }, 'spec'),
    );
    expect(error.message).toContain('resources.memoryMiB');
    expect(error.details.issues).toEqual([expect.objectContaining({ path: 'resources.memoryMiB' })]);
  });

  it.each([
    [{ image: '' }, 'image'],
    [{ image: 'x', workdir: 'relative/dir' }, 'workdir'],
    [{ image: 'x', env: { 'BAD-NAME': 'v' } }, 'env'],
    [{ image: 'x', labels: { 'Upper Case': 'v' } }, 'labels'],
    [{ image: 'x', ttlSeconds: 0 }, 'ttlSeconds'],
    [{ image: 'x', network: 'internet' }, 'network'],
    [{ image: 'x', resources: { cpus: 0 } }, 'resources.cpus'],
    [{ image: 'x', unknownKey: true }, '(root)'],
    [{ image: 'x', readiness: { argv: ['true'], command: 'true' } }, 'readiness'],
  ])('refuses %j naming %s', (input, field) => {
    expect(validationError(() => parseOrThrow(SandboxSpecSchema, input, 'spec')).message).toContain(field);
  });
});

describe('labels', () => {
  it.each(['a', 'django__django-11099', 'Task.1_b', 'x'.repeat(63), ''])('takes the value %j', (value) => {
    expect(parseOrThrow(SandboxSpecSchema, { image: 'x', labels: { task: value } }, 'spec').labels.task).toBe(
      value,
    );
  });

  it.each(['owner/repo#1', 'x'.repeat(64), '-leading', 'trailing.', 'with space', 'colon:1'])(
    'refuses the value %j, naming the label',
    (value) => {
      const error = validationError(() =>
        parseOrThrow(SandboxSpecSchema, { image: 'x', labels: { ok: 'fine', task: value } }, 'spec'),
      );
      expect(error.details.issues).toEqual([expect.objectContaining({ path: 'labels.task' })]);
      expect(error.message).toContain('63 characters');
    },
  );

  it('takes as pool names (a label value of each member) only those that end alphanumeric', () => {
    expect(parseOrThrow(PoolNameSchema, 'swe-1', 'pool name')).toBe('swe-1');
    expect(validationError(() => parseOrThrow(PoolNameSchema, 'swe-', 'pool name')).message).toContain(
      'ending alphanumeric',
    );
  });

  it('makes a valid value from any text', () => {
    expect(toLabelValue('django__django-11099')).toBe('django__django-11099');
    expect(toLabelValue('owner/repo#12')).toBe('owner-repo-12');
    expect(toLabelValue('/weird name/')).toBe('weird-name');
    for (const text of [`${'a'.repeat(62)}/b`, '__x__', 'é', 'x'.repeat(300)]) {
      expect(toLabelValue(text)).toMatch(LABEL_VALUE_PATTERN);
      expect(toLabelValue(text).length).toBeLessThanOrEqual(63);
    }
  });
});

describe('ExecRequest', () => {
  it('needs exactly one of argv and command', () => {
    validationError(() => parseOrThrow(ExecRequestSchema, {}, 'exec request'));
    validationError(() => parseOrThrow(ExecRequestSchema, { argv: ['a'], command: 'b' }, 'exec request'));
    expect(parseOrThrow(ExecRequestSchema, { command: 'ls' }, 'exec request')).toMatchObject({
      timeoutMs: 60_000,
      maxOutputBytes: 1024 * 1024,
    });
  });

  it('refuses a NUL byte in an argument and a relative cwd', () => {
    validationError(() => parseOrThrow(ExecRequestSchema, { argv: ['a\0b'] }, 'exec request'));
    validationError(() => parseOrThrow(ExecRequestSchema, { argv: ['ls'], cwd: 'tmp' }, 'exec request'));
  });
});

describe('GymError', () => {
  it('serialises to the API error shape with its HTTP status', () => {
    const error = new GymError('SANDBOX_NOT_FOUND', 'no sandbox sbx-1', { details: { id: 'sbx-1' } });
    expect(error.httpStatus).toBe(404);
    expect(JSON.parse(JSON.stringify(error))).toEqual({
      error: { code: 'SANDBOX_NOT_FOUND', message: 'no sandbox sbx-1', details: { id: 'sbx-1' } },
    });
  });
});
