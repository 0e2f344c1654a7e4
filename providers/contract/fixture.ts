import { expect } from 'vitest';
import { GymError } from '../../core/errors.ts';
import { type ExecRequestInput, ExecRequestSchema, type ExecResult } from '../../core/schemas/exec.ts';
import { type SandboxInfo, type SandboxSpecInput, SandboxSpecSchema } from '../../core/schemas/sandbox.ts';
import { parseOrThrow } from '../../core/validate.ts';
import type { CreateOptions, ProviderCapabilities, SandboxProvider } from '../sandbox-provider.ts';

export interface ContractOptions {
  /** Shown in the suite's title. */
  name: string;
  /**
   * Builds the provider under test; called once per suite, and twice more by the gateway case
   * that stands for a daemon restarting (instances must share the backend and namespace).
   */
  createProvider: () => SandboxProvider | Promise<SandboxProvider>;
  /**
   * An image with a POSIX shell and the usual small tools (`sleep`, `cat`, `tr`, `seq`, `head`,
   * `tail`, `sha256sum`, `ls`, `stat`), e.g. busybox or Debian; for the gateway cases, `wget`
   * or `python3` too.
   */
  image: string;
  /**
   * Builds a provider of the same kind whose backend does not answer (a socket nobody listens
   * on, a host that is down), for the partial-listing case; the case is skipped without it.
   */
  createUnreachableProvider?: () => SandboxProvider | Promise<SandboxProvider>;
  /**
   * What the provider declares, known before it is built. Cases for what it lacks (sessions,
   * snapshot, gateway reach, a confined timeout kill) are then not registered at all, since a
   * skipped case fails a CI that forbids skips; a lifecycle case checks that the built provider
   * declares the same. Without it such cases are registered and skip at run time.
   */
  capabilities?: Partial<ProviderCapabilities>;
  /** Skip the whole suite with this reason (for example "Docker is not running"). */
  skipReason?: string;
  /** Per-test timeout; raise it for slow backends. Default 60 s. */
  testTimeoutMs?: number;
  /**
   * Removes an image that `snapshot` or `prepareImage` made (the cases name them under
   * `gym-snapshot/` and `gym-contract/`); without it the cases leave their images behind.
   */
  removeImage?: (image: string) => Promise<void>;
  /**
   * How many build containers (or the backend's like) of the image `reference` still exist, for
   * a backend whose image builds run in one; without it the failed-plan case checks the image only.
   */
  buildLeftovers?: (reference: string) => Promise<number>;
  /**
   * For a provider whose `network: none` is a rule of its backend rather than a sandbox without
   * interfaces (Kubernetes: a Pod always has `eth0`, and a deny-all NetworkPolicy cuts it off):
   * a TCP listener that a sandbox would reach were the rule not enforced, which the helper has
   * checked is reachable from outside the rule and which writes `banner` to each connection.
   * The no-network case then checks that the sandbox cannot reach it, instead of counting
   * interfaces.
   */
  networkPolicyPeer?: () => Promise<{ host: string; port: number; banner: string }>;
}

/** Tracks every sandbox a test makes and destroys them all, whatever the test's outcome. */
export class SandboxFixture {
  readonly #created = new Set<string>();
  readonly runId = Math.random().toString(36).slice(2, 10);
  readonly options: ContractOptions;
  provider!: SandboxProvider;

  constructor(options: ContractOptions) {
    this.options = options;
  }

  spec(overrides: Partial<SandboxSpecInput> = {}): ReturnType<typeof SandboxSpecSchema.parse> {
    return parseOrThrow(
      SandboxSpecSchema,
      {
        image: this.options.image,
        ttlSeconds: 600,
        ...overrides,
        labels: { 'contract-run': this.runId, ...overrides.labels },
      },
      'spec',
    );
  }

  async create(overrides: Partial<SandboxSpecInput> = {}, options: CreateOptions = {}): Promise<SandboxInfo> {
    const info = await this.provider.create(this.spec(overrides), options);
    this.#created.add(info.id);
    return info;
  }

  exec(id: string, request: ExecRequestInput): Promise<ExecResult> {
    return this.provider.exec(id, parseOrThrow(ExecRequestSchema, request, 'exec request'));
  }

  async cleanup(): Promise<void> {
    const ids = [...this.#created];
    this.#created.clear();
    await Promise.all(ids.map((id) => this.provider.destroy(id).catch(() => {})));
  }
}

/** Awaits a promise that must fail with a GymError of one of the given codes; returns the error. */
export async function expectGymError(promise: Promise<unknown>, ...codes: string[]): Promise<GymError> {
  const error = await promise.then(
    () => null,
    (caught: unknown) => caught,
  );
  expect(error, `expected a GymError with code ${codes.join(' or ')}`).toBeInstanceOf(GymError);
  expect(codes).toContain((error as GymError).code);
  return error as GymError;
}
