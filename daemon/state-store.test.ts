import { appendFile, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { silentLogger } from '../core/logger.ts';
import { SandboxSpecSchema } from '../core/schemas/sandbox.ts';
import { type SandboxRecord, StateStore } from './state-store.ts';

const directories: string[] = [];
afterEach(async () => {
  await Promise.all(
    directories.splice(0).map((directory) => rm(directory, { recursive: true, force: true })),
  );
});

async function directory(): Promise<string> {
  const path = await mkdtemp(join(tmpdir(), 'gym-store-'));
  directories.push(path);
  return path;
}

function record(id: string, leaseExpiresAt = '2030-01-01T00:00:00.000Z'): SandboxRecord {
  return {
    id,
    provider: 'docker',
    spec: SandboxSpecSchema.parse({ image: 'img' }),
    pool: null,
    createdAt: '2026-01-01T00:00:00.000Z',
    leaseExpiresAt,
    deadlineAt: '2030-01-02T00:00:00.000Z',
    providerRef: 'ref',
    poolState: null,
    fromPool: false,
    execEnv: {},
  };
}

describe('StateStore', () => {
  it('keeps puts and deletes across a reopen', async () => {
    const path = await directory();
    const store = await StateStore.open(path, silentLogger);
    await Promise.all([store.put(record('sbx-a')), store.put(record('sbx-b')), store.put(record('sbx-c'))]);
    await store.put(record('sbx-a', '2031-01-01T00:00:00.000Z'));
    await store.delete('sbx-b');
    // No close: a crash leaves the journal as it is.
    const reopened = await StateStore.open(path, silentLogger);
    expect(
      reopened
        .all()
        .map((item) => item.id)
        .sort(),
    ).toEqual(['sbx-a', 'sbx-c']);
    expect(reopened.get('sbx-a')?.leaseExpiresAt).toBe('2031-01-01T00:00:00.000Z');
    await reopened.close();
    await store.close();
  });

  it('ignores a line torn by a crash mid-write', async () => {
    const path = await directory();
    const store = await StateStore.open(path, silentLogger);
    await store.put(record('sbx-a'));
    await store.close();
    await appendFile(join(path, 'sandboxes.jsonl'), '{"op":"put","record":{"id":"sbx-torn"');
    const reopened = await StateStore.open(path, silentLogger);
    expect(reopened.all().map((item) => item.id)).toEqual(['sbx-a']);
    await reopened.close();
  });

  it('compacts the journal on open to one line per live record', async () => {
    const path = await directory();
    const store = await StateStore.open(path, silentLogger);
    for (let index = 0; index < 50; index += 1) await store.put(record(`sbx-${index % 5}`));
    await store.delete('sbx-0');
    await store.close();
    const reopened = await StateStore.open(path, silentLogger);
    const lines = (await readFile(join(path, 'sandboxes.jsonl'), 'utf8')).trim().split('\n');
    expect(lines).toHaveLength(4);
    expect(reopened.size).toBe(4);
    await reopened.close();
  });
});
