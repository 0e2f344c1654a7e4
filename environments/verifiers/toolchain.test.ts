import { describe, expect, it } from 'vitest';
import { GymError } from '../../core/errors.ts';
import type { SandboxHandle } from '../../harnesses/harness.ts';
import { checkVerifierToolchain, shebangTools } from './toolchain.ts';

const handle = (checkToolchain?: SandboxHandle['checkToolchain']): SandboxHandle => ({
  id: 'sandbox',
  exec: async () => {
    throw new Error('the check must not run anything in the sandbox');
  },
  writeFile: async () => {},
  readFile: async () => Buffer.alloc(0),
  ...(checkToolchain === undefined ? {} : { checkToolchain }),
});

describe('the verifier toolchain check', () => {
  it('names the interpreter of a #! line, and the program env runs', () => {
    expect(shebangTools('#!/bin/bash\necho')).toEqual(['/bin/bash']);
    expect(shebangTools('#!/usr/bin/env -S python3 -u\n')).toEqual(['/usr/bin/env', 'python3']);
    expect(shebangTools('echo no shebang')).toEqual([]);
  });

  it('is reward 0, graded, with the reason and the paths when something was tampered', async () => {
    const result = await checkVerifierToolchain(
      handle(async () => ({
        tampered: [{ path: '/usr/bin/bash', change: 'modified', why: 'not the image’s' }],
        changedPaths: 3,
        durationMs: 1,
      })),
      [],
    );
    expect(result).toMatchObject({
      verdict: {
        outcome: 'reward',
        reward: 0,
        details: { toolchainCheck: 'tampered', tamperedPaths: ['/usr/bin/bash'] },
      },
    });
    expect(String(('verdict' in result && result.verdict.details.reason) || '')).toMatch(
      /^verifier toolchain tampered: \/usr\/bin\/bash/,
    );
  });

  it('records "unavailable" and lets the verifier run where the provider has no outside view', async () => {
    expect(await checkVerifierToolchain(handle(), [])).toMatchObject({ toolchainCheck: 'unavailable' });
    const unsupported = handle(async () => {
      throw new GymError('CAPABILITY_UNSUPPORTED', 'provider kubernetes cannot compare');
    });
    expect(await checkVerifierToolchain(unsupported, [])).toEqual({
      toolchainCheck: 'unavailable',
      toolchainCheckReason: 'provider kubernetes cannot compare',
    });
  });

  it('is an infra error when the check itself fails, never a pass', async () => {
    const failing = handle(async () => {
      throw new GymError('PROVIDER_ERROR', 'the engine did not answer');
    });
    expect(await checkVerifierToolchain(failing, [])).toMatchObject({ verdict: { outcome: 'infra_error' } });
  });
});
