/**
 * A sandbox's companion services: the other containers of a multi-container task (a Compose
 * file's database or server beside the agent's sandbox, a Harbor task's MCP server). They share
 * the sandbox's network namespace, as a Kubernetes Pod's containers do: each reaches the others on
 * loopback, each service's name resolves to 127.0.0.1, and nothing outside the group reaches any
 * of them (the group's network is the sandbox's own, `none` unless the spec says otherwise).
 * They live and die with their sandbox.
 */
import { z } from 'zod';
import { AbsolutePathSchema, EnvSchema, ExecArgumentSchema } from './common.ts';

/** How many services one sandbox may have beside it (a Compose file's other services). */
export const MAX_SERVICES = 16;

/** A service name as Compose writes it and a host name can carry it: a DNS label. */
export const ServiceNameSchema = z.string().regex(/^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/, {
  message: 'must be a DNS label: lower-case letters, digits and inner dashes, at most 63',
});

/**
 * Docker's `HEALTHCHECK` semantics: the test runs every `intervalMs` (the first once the
 * service started), each try may take `timeoutMs`, failures during `startPeriodMs` do not count,
 * and `retries` counted failures in a row make the service unhealthy, which fails the create.
 */
export const ServiceHealthcheckSchema = z
  .object({
    /** The command, as argv (no shell: give `sh -c ...` for one); exit 0 means healthy. */
    argv: z.array(ExecArgumentSchema).min(1).max(1024),
    intervalMs: z.number().int().positive().max(600_000).default(5_000),
    timeoutMs: z.number().int().positive().max(600_000).default(30_000),
    startPeriodMs: z.number().int().nonnegative().max(3_600_000).default(0),
    retries: z.number().int().positive().max(1000).default(3),
  })
  .strict();
export type ServiceHealthcheck = z.output<typeof ServiceHealthcheckSchema>;

export const ServiceSpecSchema = z
  .object({
    name: ServiceNameSchema,
    /** An image the provider has (a task's `build` is built before, by whoever makes the spec). */
    image: z.string().min(1).max(512),
    /** Replaces the image's `ENTRYPOINT` when given. */
    entrypoint: z.array(ExecArgumentSchema).max(1024).optional(),
    /** Replaces the image's `CMD` when given. */
    command: z.array(ExecArgumentSchema).max(1024).optional(),
    env: EnvSchema.default({}),
    workdir: AbsolutePathSchema.optional(),
    user: z.string().min(1).max(256).optional(),
    healthcheck: ServiceHealthcheckSchema.optional(),
    /**
     * Services started before this one: `started` (it runs) or `healthy` (its health check
     * passed; a service without one is `healthy` once it runs).
     */
    dependsOn: z
      .array(z.object({ service: ServiceNameSchema, condition: z.enum(['started', 'healthy']) }).strict())
      .max(MAX_SERVICES)
      .default([]),
  })
  .strict();
export type ServiceSpec = z.output<typeof ServiceSpecSchema>;
export type ServiceSpecInput = z.input<typeof ServiceSpecSchema>;

/** Names unique, dependencies named, no cycle: the order services start in, or why there is none. */
export function serviceStartOrder(services: readonly ServiceSpec[]): ServiceSpec[] | string {
  const byName = new Map<string, ServiceSpec>();
  for (const service of services) {
    if (byName.has(service.name)) return `two services are named ${service.name}`;
    byName.set(service.name, service);
  }
  const ordered: ServiceSpec[] = [];
  const state = new Map<string, 'visiting' | 'done'>();
  const visit = (service: ServiceSpec, path: string[]): string | undefined => {
    const seen = state.get(service.name);
    if (seen === 'done') return undefined;
    if (seen === 'visiting')
      return `services depend on each other in a circle: ${[...path, service.name].join(' -> ')}`;
    state.set(service.name, 'visiting');
    for (const dependency of service.dependsOn) {
      const target = byName.get(dependency.service);
      if (target === undefined)
        return `service ${service.name} depends on ${dependency.service}, which is not a service`;
      const problem = visit(target, [...path, service.name]);
      if (problem !== undefined) return problem;
    }
    state.set(service.name, 'done');
    ordered.push(service);
    return undefined;
  };
  for (const service of services) {
    const problem = visit(service, []);
    if (problem !== undefined) return problem;
  }
  return ordered;
}

export const ServicesSchema = z
  .array(ServiceSpecSchema)
  .max(MAX_SERVICES)
  .superRefine((services, context) => {
    const order = serviceStartOrder(services);
    if (typeof order === 'string') context.addIssue({ code: 'custom', message: order });
  });
