/**
 * The provider conformance suite. A provider that passes it behaves the way the daemon, the
 * harnesses and the verifiers expect. Third-party authors run it from their own vitest file:
 *
 * ```ts
 * import { describeSandboxProviderContract } from 'gym-sandboxd/providers/contract';
 * describeSandboxProviderContract({ name: 'mine', createProvider: () => new MyProvider(...), image: 'busybox' });
 * ```
 */
import { afterAll, afterEach, beforeAll, describe } from 'vitest';
import { defineExecCases, type ExecMode } from './exec-cases.ts';
import { defineFileCases } from './files-cases.ts';
import { type ContractOptions, SandboxFixture } from './fixture.ts';
import { defineGatewayCases } from './gateway-cases.ts';
import { defineImageCases } from './image-cases.ts';
import { defineLifecycleCases } from './lifecycle-cases.ts';

export type { ContractOptions } from './fixture.ts';
export { expectGymError, SandboxFixture } from './fixture.ts';

export function describeSandboxProviderContract(options: ContractOptions): void {
  const timeout = options.testTimeoutMs ?? 60_000;
  describe.skipIf(options.skipReason !== undefined)(
    `sandbox provider contract: ${options.name}`,
    { timeout },
    () => {
      const fixture = new SandboxFixture(options);
      beforeAll(async () => {
        fixture.provider = await options.createProvider();
      }, timeout);
      afterAll(async () => {
        await fixture.cleanup();
        await fixture.provider?.close();
      }, timeout);

      describe('lifecycle', () => {
        afterEach(() => fixture.cleanup(), timeout);
        defineLifecycleCases(fixture);
      });

      // Exec and file cases share one sandbox per group: they do not change what the next one sees.
      const declared = options.capabilities ?? {};
      const modes: ExecMode[] = declared.sessions === false ? ['one-shot'] : ['one-shot', 'session'];
      for (const mode of modes) {
        describe(`exec (${mode})`, () => {
          let sandboxId = '';
          beforeAll(async () => {
            if (mode === 'session' && !fixture.provider.capabilities.sessions) return;
            sandboxId = (await fixture.create({ env: { SPEC_VAR: 'from-spec' } })).id;
          }, timeout);
          defineExecCases(fixture, mode, () => sandboxId);
        });
      }

      describe('files', () => {
        let sandboxId = '';
        beforeAll(async () => {
          sandboxId = (await fixture.create()).id;
        }, timeout);
        defineFileCases(fixture, () => sandboxId);
      });

      if (declared.gatewayReach !== false)
        describe('gateway reach', () => {
          afterEach(() => fixture.cleanup(), timeout);
          defineGatewayCases(fixture);
        });

      describe('images', () => {
        defineImageCases(fixture);
      });
    },
  );
}
