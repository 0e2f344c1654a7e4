/**
 * The daemon's pools: defined in the config (created at start) and through the API, persisted in
 * the state directory so they survive a restart, and re-adopting their members from the store.
 */
import { open, readFile, rename } from 'node:fs/promises';
import { join } from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import { GymError } from '../../core/errors.ts';
import type { Logger } from '../../core/logger.ts';
import type { Sandbox } from '../../core/schemas/api.ts';
import {
  POOL_OVERRIDABLE_FIELDS,
  type PoolDefinition,
  PoolDefinitionSchema,
  PoolNameSchema,
  type PoolStats,
} from '../../core/schemas/pool.ts';
import { SandboxSpecSchema } from '../../core/schemas/sandbox.ts';
import { parseSnapshotRef } from '../../core/schemas/snapshot.ts';
import { parseOrThrow } from '../../core/validate.ts';
import type { DaemonMetrics, PoolCounts } from '../metrics.ts';
import { requireUserLabels } from '../snapshots/labels.ts';
import { Pool } from './pool.ts';
import type { PoolSandboxes } from './pool-sandboxes.ts';

const POOLS_FILE = 'pools.json';

export interface PoolManagerOptions {
  manager: PoolSandboxes;
  stateDir: string;
  logger: Logger;
  metrics?: DaemonMetrics;
}

export class PoolManager implements PoolCounts {
  readonly #manager: PoolSandboxes;
  readonly #stateDir: string;
  readonly #logger: Logger;
  readonly #metrics: DaemonMetrics | undefined;
  readonly #pools = new Map<string, Pool>();
  #writing: Promise<void> = Promise.resolve();

  constructor(options: PoolManagerOptions) {
    this.#manager = options.manager;
    this.#stateDir = options.stateDir;
    this.#logger = options.logger;
    this.#metrics = options.metrics;
    this.#manager.lifecycle.onRemoved((record, reason) => {
      if (record.pool !== null) this.#pools.get(record.pool)?.removed(record, reason);
    });
  }

  /**
   * Loads the persisted pools, applies the config's (which win on a name clash), re-adopts the
   * members the store knows, destroys idle members of pools that no longer exist, and starts refill.
   */
  async start(configPools: Readonly<Record<string, PoolDefinition>>): Promise<void> {
    const persisted = await this.#load();
    for (const [name, definition] of Object.entries({ ...persisted, ...configPools })) {
      this.#pools.set(name, new Pool(name, definition, this.#manager, this.#logger, this.#metrics));
    }
    for (const record of this.#manager.lifecycle.poolRecords()) {
      const pool = this.#pools.get(record.pool!);
      if (pool !== undefined) pool.adopt(record);
      else if (record.poolState === 'idle')
        void this.#manager.lifecycle.destroy(record.id, 'pool-removed').catch(() => {});
    }
    await this.#persist();
    for (const pool of this.#pools.values()) pool.refill();
    if (this.#pools.size > 0) {
      this.#logger.info(
        { pools: Object.fromEntries([...this.#pools].map(([name, pool]) => [name, pool.counts])) },
        'pools started',
      );
    }
  }

  async #load(): Promise<Record<string, PoolDefinition>> {
    let text: string;
    try {
      text = await readFile(join(this.#stateDir, POOLS_FILE), 'utf8');
    } catch {
      return {};
    }
    const loaded: Record<string, PoolDefinition> = {};
    for (const [name, raw] of Object.entries(JSON.parse(text) as Record<string, unknown>)) {
      try {
        loaded[name] = parseOrThrow(PoolDefinitionSchema, raw, `pool ${name}`);
      } catch (error) {
        this.#logger.error(
          { pool: name, error: String(error) },
          'skipped a stored pool that no longer validates',
        );
      }
    }
    return loaded;
  }

  /** Writes every definition atomically (temporary file, fsync, rename), one write at a time. */
  #persist(): Promise<void> {
    this.#writing = this.#writing.then(async () => {
      const path = join(this.#stateDir, POOLS_FILE);
      const temporary = `${path}.tmp`;
      const handle = await open(temporary, 'w', 0o600);
      try {
        await handle.writeFile(
          `${JSON.stringify(Object.fromEntries([...this.#pools].map(([name, pool]) => [name, pool.definition])), null, 2)}\n`,
        );
        await handle.datasync();
      } finally {
        await handle.close();
      }
      await rename(temporary, path);
    });
    return this.#writing;
  }

  #pool(name: string): Pool {
    const pool = this.#pools.get(name);
    if (pool === undefined) {
      throw new GymError(
        'POOL_NOT_FOUND',
        `no pool named "${name}"; defined: ${[...this.#pools.keys()].join(', ') || '(none)'}`,
        {
          details: { pool: name, available: [...this.#pools.keys()] },
        },
      );
    }
    return pool;
  }

  /** Defines or redefines a pool. Returns its stats and whether it is new. */
  async define(name: string, input: unknown): Promise<{ stats: PoolStats; isNew: boolean }> {
    parseOrThrow(PoolNameSchema, name, 'pool name');
    const definition = parseOrThrow(PoolDefinitionSchema, input, `pool ${name}`);
    requireUserLabels(definition.spec.labels, `pool ${name}`);
    // Refused now, not by every refill in the background.
    this.#manager.lifecycle.checkSpec(definition.spec);
    const existing = this.#pools.get(name);
    if (existing === undefined)
      this.#pools.set(name, new Pool(name, definition, this.#manager, this.#logger, this.#metrics));
    else existing.redefine(definition);
    await this.#persist();
    const pool = this.#pool(name);
    pool.refill();
    return { stats: pool.stats(), isNew: existing === undefined };
  }

  stats(name: string): PoolStats {
    return this.#pool(name).stats();
  }

  list(): PoolStats[] {
    return [...this.#pools.values()]
      .map((pool) => pool.stats())
      .sort((left, right) => left.name.localeCompare(right.name));
  }

  /** Drains and forgets a pool: idle members are destroyed, leased ones live out their leases. Idempotent. */
  async remove(name: string): Promise<void> {
    const pool = this.#pools.get(name);
    if (pool === undefined) return;
    this.#pools.delete(name);
    await this.#persist();
    await pool.drain();
  }

  /**
   * Takes a sandbox from a pool for a create request `{"pool": name, ...}`. The request may set
   * env (for its execs), labels and ttlSeconds; any other field must equal the pool's spec.
   */
  async acquire(body: Record<string, unknown>): Promise<Sandbox> {
    const { pool: name, ...rest } = body;
    if (typeof name !== 'string')
      throw new GymError('VALIDATION_FAILED', 'invalid sandbox spec: pool: must be a pool name');
    const pool = this.#pool(name);
    const { spec } = pool.definition;
    for (const [field, value] of Object.entries(rest)) {
      if ((POOL_OVERRIDABLE_FIELDS as readonly string[]).includes(field)) continue;
      if (!isDeepStrictEqual(value, (spec as Record<string, unknown>)[field])) {
        throw new GymError(
          'VALIDATION_FAILED',
          `invalid sandbox spec: ${field}: differs from pool "${name}", and a pooled sandbox cannot change it after creation; only ${POOL_OVERRIDABLE_FIELDS.join(', ')} may be set per acquire`,
          { details: { issues: [{ path: field, message: 'differs from the pool spec' }], pool: name } },
        );
      }
    }
    // Validate the overrides in the context of a whole spec, so errors name the field as usual.
    const merged = parseOrThrow(
      SandboxSpecSchema,
      {
        ...spec,
        ttlSeconds: rest.ttlSeconds ?? spec.ttlSeconds,
        labels: rest.labels ?? {},
        env: rest.env ?? {},
      },
      'sandbox spec',
    );
    requireUserLabels(merged.labels, 'sandbox spec');
    return pool.acquire({ ttlSeconds: merged.ttlSeconds, labels: merged.labels, env: merged.env });
  }

  /** The pools whose spec starts from snapshot `snapshotId` (`snapshot:<id>`). */
  startingFrom(snapshotId: string): string[] {
    return [...this.#pools]
      .filter(([, pool]) => parseSnapshotRef(pool.definition.spec.image) === snapshotId)
      .map(([name]) => name)
      .sort();
  }

  poolCounts(): Array<{ pool: string; idle: number; leased: number; creating: number }> {
    return [...this.#pools].map(([pool, instance]) => ({ pool, ...instance.counts }));
  }

  stop(): void {
    for (const pool of this.#pools.values()) pool.stop();
  }
}
