/**
 * The Pod's services without a cluster: Docker's health check as a startup probe, what a Pod
 * cannot carry, and the statuses a kubelet writes that the emulator does not (a sidecar it
 * restarted after it exited or failed its probe).
 */
import type { V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { SandboxSpecSchema } from '../../core/schemas/sandbox.ts';
import { ServiceHealthcheckSchema, ServiceSpecSchema } from '../../core/schemas/services.ts';
import { KubernetesProviderOptionsSchema } from './options.ts';
import { podManifest } from './pod-manifest.ts';
import { servicesProblem, startupProbe } from './pod-services.ts';

const manifest = (input: Record<string, unknown>) =>
  podManifest(
    SandboxSpecSchema.parse({ image: 'busybox', ...input }),
    'gym-test-sbx-1',
    {},
    KubernetesProviderOptionsSchema.parse({}),
    3600,
  );

const podWith = (status: Record<string, unknown>): V1Pod => ({
  status: {
    initContainerStatuses: [
      { name: 'svc-db', image: 'db', imageID: '', ready: false, restartCount: 0, ...status },
    ],
  },
});
const db = (healthcheck?: Record<string, unknown>) =>
  ServiceSpecSchema.parse({ name: 'db', image: 'db', ...(healthcheck === undefined ? {} : { healthcheck }) });

describe('the Pod of a sandbox with services', () => {
  it("turns Docker's health check into a startup probe: whole seconds, the start period as extra tries", () => {
    const probe = startupProbe(
      ServiceHealthcheckSchema.parse({
        argv: ['pg_isready'],
        intervalMs: 2000,
        timeoutMs: 500,
        startPeriodMs: 10_000,
        retries: 3,
      }),
    );
    expect(probe).toEqual({
      exec: { command: ['pg_isready'] },
      periodSeconds: 2,
      timeoutSeconds: 1,
      failureThreshold: 3 + 5,
      successThreshold: 1,
    });
  });

  it('puts the user on the sandbox container, so a service without one runs as its image says', () => {
    const pod = manifest({ user: '1000:1000', services: [{ name: 'db', image: 'db' }] });
    expect(pod.spec?.securityContext).toEqual({ seccompProfile: { type: 'RuntimeDefault' } });
    expect(pod.spec?.containers[0]?.securityContext).toMatchObject({ runAsUser: 1000, runAsGroup: 1000 });
    expect(pod.spec?.initContainers?.[0]?.securityContext?.runAsUser).toBeUndefined();
  });

  it('refuses what a Pod cannot carry: a user name, a service name too long for a container name', () => {
    expect(() => manifest({ services: [{ name: 'db', image: 'db', user: 'postgres' }] })).toThrow(
      /uid or uid:gid/,
    );
    expect(() => manifest({ services: [{ name: 'a'.repeat(62), image: 'db' }] })).toThrow(
      /longer than a container name's 63 characters/,
    );
  });

  it('reads a sidecar the kubelet restarted as the failure it was', () => {
    const exited = podWith({
      restartCount: 1,
      lastState: { terminated: { exitCode: 3 } },
      state: { running: {} },
    });
    expect(servicesProblem('sbx-1', exited, [db()])?.message).toBe(
      'sandbox sbx-1 failed to start and was removed: service db exited with code 3',
    );
    const probeKilled = podWith({
      restartCount: 1,
      started: false,
      lastState: { terminated: { exitCode: 137 } },
    });
    expect(servicesProblem('sbx-1', probeKilled, [db({ argv: ['false'] })])).toMatchObject({
      // The task's fault: a runner makes it a task error, not an outage to retry.
      code: 'SERVICE_UNHEALTHY',
      message: expect.stringMatching(/service db is unhealthy: its health check failed its retries/),
    });
    const pulling = podWith({ state: { waiting: { reason: 'ErrImagePull', message: 'not found' } } });
    expect(servicesProblem('sbx-1', pulling, [db()])).toMatchObject({
      code: 'SANDBOX_START_FAILED',
      details: { service: 'db' },
    });
    expect(servicesProblem('sbx-1', podWith({ state: { running: {} } }), [db()])).toBeNull();
  });
});
