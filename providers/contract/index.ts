/**
 * The provider conformance suite. A provider that passes it behaves the way the daemon, the
 * harnesses and the verifiers expect. Third-party authors run it from their own vitest file:
 *
 * ```ts
 * import { describeSandboxProviderContract } from 'gym-sandboxd/providers/contract';
 * describeSandboxProviderContract({ name: 'mine', createProvider: () => new MyProvider(...), image: 'busybox' });
 * ```
 *
 * It tests the provider alone, not the daemon above it. So it has no case for a session command
 * falling back to one-shot on a provider without sessions: that is the daemon's job
 * (`sessionOrOneShot` in `daemon/capabilities.ts`), the same for every provider, and tested there
 * (`daemon/capabilities.test.ts`, "sessions are a hint") and end to end by the harnesses and
 * `gym eval run` on a provider without sessions (`test/second-provider/`). What the suite asks of
 * such a provider is that it refuse a session itself (`CAPABILITY_UNSUPPORTED`, the lifecycle
 * cases), and of one with sessions that a session command behave like a one-shot one (the exec
 * cases run in both modes).
 */
import { afterAll, afterEach, beforeAll, describe } from 'vitest';
import { defineExecCases, type ExecMode } from './exec-cases.ts';
import { defineFileCases } from './files-cases.ts';
import { type ContractOptions, SandboxFixture } from './fixture.ts';
import { defineGatewayCases } from './gateway-cases.ts';
import { defineImageCases } from './image-cases.ts';
import { defineLifecycleCases } from './lifecycle-cases.ts';
import { definePortCases } from './port-cases.ts';
import { defineSnapshotCases } from './snapshot-cases.ts';

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

      describe('ports', () => {
        afterEach(() => fixture.cleanup(), timeout);
        definePortCases(fixture);
      });

      // One parent and its children, shared by the cases (each leaves the parent as it found it).
      describe('snapshot', () => {
        defineSnapshotCases(fixture, timeout);
      });

      describe('images', () => {
        defineImageCases(fixture);
      });
    },
  );
}
