/** The options every SSH runtime takes, with the runtime's own host fields and options beside them. */
import { z } from 'zod';
import { DEFAULT_RELAY_HELPER_PATH } from '../shared/gateway-relay.ts';
import { FleetConnectionFields, type HostConfig, HostSchema } from '../ssh/host-fleet.ts';
import { SlurmModeSchema } from '../ssh/slurm-hosts.ts';

/** A runtime's host: the fleet's host fields and `command`, the runtime's program there (default: its name). */
export function sshRuntimeHostSchema<Command extends string>(command: Command) {
  const fields = { [command]: z.string().default(command) } as Record<Command, z.ZodDefault<z.ZodString>>;
  return HostSchema.extend(fields).strict();
}

/**
 * The options of an SSH runtime: its hosts (`hostSchema`: the shared host fields and the
 * runtime's command) or a Slurm allocation, the fleet's connection settings, gateway reach, and
 * the runtime's own `fields`.
 */
export function sshRuntimeOptionsSchema<Host extends z.ZodType, Fields extends z.ZodRawShape>(
  hostSchema: Host,
  fields: Fields,
) {
  return z
    .object({
      /** The hosts; or, with `slurm`, none: the nodes of the allocation are the hosts. */
      hosts: z.array(hostSchema).min(1).optional(),
      /** Slurm mode: hold an allocation and run the sandboxes on its nodes. */
      slurm: SlurmModeSchema.optional(),
      ...FleetConnectionFields,
      ...fields,
      /** Gateway reach (`exposeGateway`) through the relay; off without the relay binary. */
      gatewayReach: z.boolean().default(true),
      /** The static relay copied to each host (built by scripts/setup.sh). */
      relayHelperPath: z.string().startsWith('/').default(DEFAULT_RELAY_HELPER_PATH),
      /** Open relay connections per sandbox at most; one more is closed at once. */
      relayMaxConnections: z.number().int().positive().max(4096).default(32),
    })
    .strict()
    .refine(
      (options: { hosts?: unknown; slurm?: unknown }) =>
        (options.hosts === undefined) !== (options.slurm === undefined),
      { message: 'give either hosts or slurm' },
    );
}

/** The parsed options every SSH runtime has (see `sshRuntimeOptionsSchema`). */
export interface SshRuntimeOptions<H extends HostConfig> {
  hosts?: H[] | undefined;
  slurm?: z.output<typeof SlurmModeSchema> | undefined;
  keepaliveIntervalMs: number;
  keepaliveCountMax: number;
  maxChannels: number;
  maxConnections: number;
  idleCloseMs: number;
  commandRunner: boolean;
  shellStartTimeoutMs: number;
  gatewayReach: boolean;
  relayHelperPath: string;
  relayMaxConnections: number;
}
