import { describe, expect, it } from 'vitest';
import { SandboxSpecSchema } from '../../core/schemas/sandbox.ts';
import { parseOrThrow } from '../../core/validate.ts';
import { KubernetesProviderOptionsSchema } from './options.ts';
import { podManifest } from './pod-manifest.ts';

const resourcesOf = (resources: Record<string, number>, options: Record<string, unknown> = {}) =>
  podManifest(
    parseOrThrow(SandboxSpecSchema, { image: 'busybox', resources }, 'spec'),
    'gym-test-sbx-1',
    {},
    KubernetesProviderOptionsSchema.parse(options),
    3600,
  ).spec?.containers[0]?.resources;

describe('the Pod manifest: what a Pod requests of its node', () => {
  it('requests its limits by default (Guaranteed): a real scheduler reserves all of them', () => {
    expect(resourcesOf({ cpus: 2, memoryMiB: 4096, diskMiB: 512 })).toEqual({
      limits: { cpu: '2000m', memory: '4096Mi', 'ephemeral-storage': '512Mi' },
      requests: { cpu: '2000m', memory: '4096Mi' },
    });
  });

  it("requests the operator's fraction of them, rounded up and never zero, with the limits unchanged", () => {
    expect(resourcesOf({ cpus: 2, memoryMiB: 4096 }, { requestFraction: 0.25 })).toEqual({
      limits: { cpu: '2000m', memory: '4096Mi' },
      requests: { cpu: '500m', memory: '1024Mi' },
    });
    expect(resourcesOf({ cpus: 0.01, memoryMiB: 6 }, { requestFraction: 0.01 })?.requests).toEqual({
      cpu: '1m',
      memory: '1Mi',
    });
  });

  it('never requests more than its limit, whatever the floating point of the cpus', () => {
    expect(resourcesOf({ cpus: 4.03 })).toEqual({ limits: { cpu: '4030m' }, requests: { cpu: '4030m' } });
  });

  it('takes a fraction in (0, 1] only', () => {
    for (const requestFraction of [0, -0.5, 1.5])
      expect(KubernetesProviderOptionsSchema.safeParse({ requestFraction }).success).toBe(false);
  });
});
