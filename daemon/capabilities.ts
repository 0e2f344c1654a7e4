/**
 * Every capability check of the manager, in one place: what a request needs of its provider
 * beyond the required operations (`ProviderCapabilities`). A missing capability is refused here,
 * before the request reaches the provider, with `CAPABILITY_UNSUPPORTED` and details
 * `{ provider, capability }`. The spec check is `providers/shared/spec-capabilities.ts`, which a
 * provider used on its own runs too.
 *
 * Sessions are the exception: they are a hint. By the exec contract a command behaves the same
 * through a session and one-shot, so where there are none the command runs one-shot and its
 * result says so (`session: false`).
 */
import type { ExecRequest } from '../core/schemas/exec.ts';
import type { SandboxSpec } from '../core/schemas/sandbox.ts';
import type { ImageStore } from '../images/build.ts';
import type { ImageFormat, ProviderCapabilities, SandboxProvider } from '../providers/sandbox-provider.ts';
import {
  requireSpecCapabilities as requireCapabilities,
  capabilityUnsupported as unsupported,
} from '../providers/shared/spec-capabilities.ts';

/**
 * What a spec asks of its provider: gpus, a disk limit, and its network mode.
 * @throws GymError `CAPABILITY_UNSUPPORTED` naming the first capability missing.
 */
export function requireSpecCapabilities(
  providerName: string,
  provider: SandboxProvider,
  spec: SandboxSpec,
): void {
  requireCapabilities(providerName, provider.capabilities, spec, provider.capabilityHints);
}

/**
 * The request as the provider can run it: through its session where the provider has sessions,
 * otherwise one-shot (`isSession: false`, and the request no longer names a session).
 */
export function sessionOrOneShot(
  provider: SandboxProvider,
  request: ExecRequest,
): { request: ExecRequest; isSession: boolean } {
  if (request.session === undefined) return { request, isSession: false };
  if (provider.capabilities.sessions) return { request, isSession: true };
  const { session: _hint, ...oneShot } = request;
  return { request: oneShot, isSession: false };
}

/** The optional operations a capability flag stands for. */
type OptionalOperation = 'snapshot' | 'stopProcesses' | 'exposeGateway' | 'checkToolchain' | 'openPty';

/** An optional operation bound to its provider; CAPABILITY_UNSUPPORTED unless both it and its flag are there. */
function requireOperation<Name extends OptionalOperation>(
  providerName: string,
  provider: SandboxProvider,
  operation: Name,
  capability: keyof ProviderCapabilities,
  missing: string,
): NonNullable<SandboxProvider[Name]> {
  const method = provider[operation];
  if (method === undefined || provider.capabilities[capability] !== true) {
    throw unsupported(providerName, capability, missing);
  }
  return method.bind(provider) as NonNullable<SandboxProvider[Name]>;
}

/**
 * `snapshot()`, bound to its provider.
 * @throws GymError `CAPABILITY_UNSUPPORTED` without the `snapshot` capability.
 */
export function requireSnapshot(
  providerName: string,
  provider: SandboxProvider,
): NonNullable<SandboxProvider['snapshot']> {
  return requireOperation(providerName, provider, 'snapshot', 'snapshot', 'cannot snapshot sandboxes');
}

/**
 * `stopProcesses()`, bound to its provider.
 * @throws GymError `CAPABILITY_UNSUPPORTED` without the `stopProcesses` capability.
 */
export function requireStopProcesses(
  providerName: string,
  provider: SandboxProvider,
): NonNullable<SandboxProvider['stopProcesses']> {
  return requireOperation(
    providerName,
    provider,
    'stopProcesses',
    'stopProcesses',
    'cannot stop the processes of a sandbox',
  );
}

/**
 * `checkToolchain()`, bound to its provider.
 * @throws GymError `CAPABILITY_UNSUPPORTED` without the `toolchainCheck` capability: the provider
 *   has no view of a sandbox's files from outside it.
 */
export function requireToolchainCheck(
  providerName: string,
  provider: SandboxProvider,
): NonNullable<SandboxProvider['checkToolchain']> {
  return requireOperation(
    providerName,
    provider,
    'checkToolchain',
    'toolchainCheck',
    "cannot compare a sandbox's files with its image from outside the sandbox",
  );
}

/**
 * `openPty()`, bound to its provider.
 * @throws GymError `CAPABILITY_UNSUPPORTED` without the `pty` capability.
 */
export function requirePty(
  providerName: string,
  provider: SandboxProvider,
): NonNullable<SandboxProvider['openPty']> {
  return requireOperation(providerName, provider, 'openPty', 'pty', 'cannot open terminals in a sandbox');
}

/**
 * `exposeGateway()`, bound to its provider: the hook for gateway reach, so that its check lives
 * here with the others.
 * @throws GymError `CAPABILITY_UNSUPPORTED` without the `gatewayReach` capability.
 */
export function requireGatewayReach(
  providerName: string,
  provider: SandboxProvider,
): NonNullable<SandboxProvider['exposeGateway']> {
  return requireOperation(
    providerName,
    provider,
    'exposeGateway',
    'gatewayReach',
    'cannot make the gateway reachable from a sandbox',
  );
}

/**
 * An egress policy that opens anything is carried by the gateway relay (the proxy is served on
 * the gateway socket): on a provider without gateway reach it is refused here, before a sandbox
 * is made for it or its policy changed, rather than after.
 * @throws GymError `CAPABILITY_UNSUPPORTED` naming `gatewayReach`.
 */
export function requireEgressReach(providerName: string, provider: SandboxProvider): void {
  if (provider.exposeGateway === undefined || !provider.capabilities.gatewayReach) {
    throw unsupported(
      providerName,
      'gatewayReach',
      'cannot carry an egress policy: its sandboxes reach the egress proxy through the gateway relay, which this provider does not offer (a policy of mode none is accepted)',
      { feature: 'egress' },
    );
  }
}

/**
 * `exposeGateway()` bound to its provider where it has gateway reach, otherwise undefined: for
 * the paths that skip quietly instead of refusing (restoring reach after a restart).
 */
export function gatewayReachIfAny(provider: SandboxProvider): SandboxProvider['exposeGateway'] {
  const method = provider.exposeGateway;
  return method === undefined || !provider.capabilities.gatewayReach ? undefined : method.bind(provider);
}

/**
 * The provider's image part (`prepareImage`, `inspectImage`, `listImages`), bound to it, with the
 * formats it accepts.
 * @throws GymError `CAPABILITY_UNSUPPORTED` when it declares no `imageFormats` or lacks one of the
 *   three operations.
 */
export function requireImages(providerName: string, provider: SandboxProvider): ImageStore {
  const formats = provider.capabilities.imageFormats ?? [];
  const { prepareImage, inspectImage, listImages } = provider;
  if (
    formats.length === 0 ||
    prepareImage === undefined ||
    inspectImage === undefined ||
    listImages === undefined
  ) {
    throw unsupported(
      providerName,
      'imageFormats',
      'prepares no images: name images in specs as its backend has them',
    );
  }
  return {
    formats,
    prepareImage: prepareImage.bind(provider),
    inspectImage: inspectImage.bind(provider),
    listImages: listImages.bind(provider),
  };
}

/**
 * The provider's image part, as `requireImages`, when it also takes sources of `format` (a build
 * plan, say).
 * @throws GymError `CAPABILITY_UNSUPPORTED` (capability `imageFormats`, details `format`) when it
 *   has no image part or does not take that format.
 */
export function requireImageFormat(
  providerName: string,
  provider: SandboxProvider,
  format: ImageFormat,
  missing: string,
): ImageStore {
  const images = requireImages(providerName, provider);
  if (!images.formats.includes(format)) throw unsupported(providerName, 'imageFormats', missing, { format });
  return images;
}
