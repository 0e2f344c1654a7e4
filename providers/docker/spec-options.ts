/**
 * What a spec's `providerOptions` may ask of the Docker provider: capabilities added back, the
 * size of /dev/shm, read-only bind mounts. What of it reaches the host is the operator's to
 * allow (`host-access.ts`).
 */
import { z } from 'zod';

/** What a spec's `providerOptions` may say to the Docker provider. */
export const DockerSpecOptionsSchema = z
  .object({
    /** Capabilities to add back on top of the defaults (for example `NET_BIND_SERVICE`). */
    capAdd: z
      .array(z.string().regex(/^[A-Z_]+$/))
      .max(40)
      .default([]),
    /** Size of /dev/shm in MiB. */
    shmSizeMiB: z
      .number()
      .int()
      .positive()
      .max(1024 * 1024)
      .optional(),
    /** Host directories mounted read-only (`{hostPath, path}`), e.g. a cache of agent binaries. */
    readOnlyBinds: z
      .array(z.object({ hostPath: z.string().startsWith('/'), path: z.string().startsWith('/') }).strict())
      .max(16)
      .default([]),
  })
  .strict();
