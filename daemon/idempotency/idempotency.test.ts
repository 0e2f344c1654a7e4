/**
 * `Idempotency-Key` on the HTTP API, against the in-memory provider: a repeat runs nothing and
 * gets the first answer, also after a restart on the same state directory; another request under
 * the same key is refused; keys are per credential.
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { InjectOptions } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { GymError } from '../../core/errors.ts';
import type { ProviderContext } from '../../providers/sandbox-provider.ts';
import { startTestDaemon, type TestDaemon } from '../../test/daemon-harness.ts';
import { MemoryProvider } from '../../test/fixtures/memory-provider.ts';
import { waitFor } from '../../test/wait-for.ts';
import { entryId, MAX_ANSWER_BYTES } from './store.ts';

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** A daemon on `stateDir` whose provider is `provider` (kept across restarts, as an engine is). */
async function start(stateDir: string, provider: { current?: MemoryProvider }): Promise<TestDaemon> {
  const daemon = await startTestDaemon(
    { stateDir, providers: [{ name: 'memory' }] },
    {
      factories: {
        memory: (_options: unknown, context: ProviderContext) => {
          provider.current ??= new MemoryProvider(context);
          return provider.current;
        },
      },
    },
  );
  return daemon;
}

async function setUp() {
  const stateDir = await mkdtemp(join(tmpdir(), 'gym-idempotency-'));
  const provider: { current?: MemoryProvider } = {};
  let daemon = await start(stateDir, provider);
  cleanups.push(async () => {
    await daemon.stop();
    await rm(stateDir, { recursive: true, force: true });
  });
  const send = (options: InjectOptions, key?: string, auth = daemon.auth) =>
    daemon.app.inject({
      ...options,
      headers: { ...auth, ...(key === undefined ? {} : { 'idempotency-key': key }), ...options.headers },
    });
  return {
    stateDir,
    provider: () => provider.current!,
    daemon: () => daemon,
    send,
    restart: async () => {
      await daemon.stop();
      daemon = await start(stateDir, provider);
    },
  };
}

const CREATE = {
  method: 'POST',
  url: '/v1/sandboxes',
  payload: { image: 'img', labels: { t: 'idem' } },
} as const;
const exec = (id: string, argv = ['echo', 'once']) =>
  ({ method: 'POST', url: `/v1/sandboxes/${id}/exec`, payload: { argv } }) as const;

describe('Idempotency-Key', () => {
  it('runs a create and an exec sent twice with one key once, and answers the repeat with the first answer', async () => {
    const test = await setUp();
    const first = await test.send(CREATE, 'create-1');
    expect(first.statusCode, first.body).toBe(201);
    const again = await test.send(CREATE, 'create-1');
    expect(again.statusCode).toBe(201);
    expect(again.body).toBe(first.body);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(first.headers['idempotent-replayed']).toBeUndefined();
    expect(test.provider().sandboxes.size).toBe(1);

    const id = first.json().id as string;
    const ran = await test.send(exec(id), 'exec-1');
    expect(ran.statusCode, ran.body).toBe(200);
    const repeated = await test.send(exec(id), 'exec-1');
    expect(repeated.body).toBe(ran.body);
    expect(test.provider().execs).toHaveLength(1);

    // Without a key, or with another, a request runs as it always did.
    await test.send(exec(id));
    await test.send(exec(id), 'exec-2');
    expect(test.provider().execs).toHaveLength(3);
  });

  it('runs concurrent repeats once: the later ones wait for the first and get its answer', async () => {
    const test = await setUp();
    const answers = await Promise.all([1, 2, 3, 4].map(() => test.send(CREATE, 'burst')));
    expect(answers.map((answer) => answer.statusCode)).toEqual([201, 201, 201, 201]);
    expect(new Set(answers.map((answer) => answer.json().id)).size).toBe(1);
    expect(test.provider().sandboxes.size).toBe(1);
  });

  it('refuses the key with another body or another sandbox (422), and runs nothing', async () => {
    const test = await setUp();
    const one = (await test.send(CREATE)).json().id as string;
    const two = (await test.send(CREATE)).json().id as string;
    expect((await test.send(exec(one, ['echo', 'a']), 'k')).statusCode).toBe(200);
    for (const other of [exec(one, ['echo', 'b']), exec(two, ['echo', 'a'])]) {
      const refused = await test.send(other, 'k');
      expect(refused.statusCode).toBe(422);
      expect(refused.json().error.code).toBe('IDEMPOTENCY_KEY_MISMATCH');
    }
    const createRefused = await test.send({ ...CREATE, payload: { image: 'other' } }, 'k');
    expect(createRefused.json().error.code).toBe('IDEMPOTENCY_KEY_MISMATCH');
    expect(test.provider().execs).toHaveLength(1);
    expect(test.provider().sandboxes.size).toBe(2);
  });

  it('frees a key whose request was refused before it ran (a bad body, an unknown sandbox)', async () => {
    const test = await setUp();
    const bad = await test.send({ ...CREATE, payload: { image: '' } }, 'retry-me');
    expect(bad.statusCode).toBe(400);
    const missing = await test.send(exec('sbx-doesnotexist1'), 'retry-me-too');
    expect(missing.statusCode).toBe(404);
    // The same key with the request fixed runs.
    const fixed = await test.send(CREATE, 'retry-me');
    expect(fixed.statusCode, fixed.body).toBe(201);
    expect(fixed.headers['idempotent-replayed']).toBeUndefined();
  });

  it('keeps keys per credential: a scoped credential cannot reach the answer of the token holder’s key', async () => {
    const test = await setUp();
    const id = (await test.send(CREATE)).json().id as string;
    const minted = await test.send({
      method: 'POST',
      url: '/v1/access',
      payload: { sandboxIds: [id], rights: ['exec'] },
    });
    expect(minted.statusCode, minted.body).toBe(201);
    const grant = { authorization: `Bearer ${minted.json().token as string}` };

    const mine = await test.send(exec(id, ['echo', 'token secret']), 'shared-key');
    expect(mine.json().stdout).toBe('echo token secret\n');
    // The agent guesses the key, with the same request: it runs its own, and never sees the token's answer.
    const theirs = await test.send(exec(id, ['echo', 'token secret']), 'shared-key', grant);
    expect(theirs.statusCode, theirs.body).toBe(200);
    expect(theirs.headers['idempotent-replayed']).toBeUndefined();
    // With another body under the same key: its own request, not a mismatch with the token's.
    const other = await test.send(exec(id, ['echo', 'agent']), 'other-key', grant);
    expect(other.json().stdout).toBe('echo agent\n');
    expect(test.provider().execs).toHaveLength(3);
    // Each holder's repeat gets its own first answer.
    const repeat = await test.send(exec(id, ['echo', 'agent']), 'other-key', grant);
    expect(repeat.headers['idempotent-replayed']).toBe('true');
    expect(test.provider().execs).toHaveLength(3);
  });

  it('answers a repeat after a restart on the same state directory without running it again', async () => {
    const test = await setUp();
    const created = await test.send(CREATE, 'create-restart');
    const id = created.json().id as string;
    const ran = await test.send(exec(id), 'exec-restart');
    const file = await test.send(
      {
        method: 'PUT',
        url: `/v1/sandboxes/${id}/files?path=/tmp/a`,
        payload: Buffer.from('first'),
        headers: { 'content-type': 'application/octet-stream' },
      },
      'file-restart',
    );
    expect(file.statusCode, file.body).toBe(204);

    await test.restart();
    const createdAgain = await test.send(CREATE, 'create-restart');
    expect(createdAgain.json().id).toBe(id);
    expect(createdAgain.headers['idempotent-replayed']).toBe('true');
    const ranAgain = await test.send(exec(id), 'exec-restart');
    expect(ranAgain.body).toBe(ran.body);
    expect(test.provider().sandboxes.size).toBe(1);
    expect(test.provider().execs).toHaveLength(1);
    // A file write: the same bytes are answered, other bytes under the key are refused.
    const fileAgain = await test.send(
      {
        method: 'PUT',
        url: `/v1/sandboxes/${id}/files?path=/tmp/a`,
        payload: Buffer.from('first'),
        headers: { 'content-type': 'application/octet-stream' },
      },
      'file-restart',
    );
    expect(fileAgain.statusCode).toBe(204);
    expect(fileAgain.headers['idempotent-replayed']).toBe('true');
    const fileOther = await test.send(
      {
        method: 'PUT',
        url: `/v1/sandboxes/${id}/files?path=/tmp/a`,
        payload: Buffer.from('other'),
        headers: { 'content-type': 'application/octet-stream' },
      },
      'file-restart',
    );
    expect(fileOther.json().error.code).toBe('IDEMPOTENCY_KEY_MISMATCH');
    // Neither the key nor the credential is written down.
    const journal = await readFile(join(test.stateDir, 'idempotency.jsonl'), 'utf8');
    expect(journal).not.toContain('exec-restart');
    expect(journal).not.toContain(test.daemon().token);
  });

  it('answers a streamed exec repeated with its result', async () => {
    const test = await setUp();
    const id = (await test.send(CREATE)).json().id as string;
    const streamed = { ...exec(id), url: `/v1/sandboxes/${id}/exec?stream=ndjson` };
    const first = await test.send(streamed, 'stream-1');
    const lines = first.body.trim().split('\n');
    const again = await test.send(streamed, 'stream-1');
    expect(again.headers['content-type']).toContain('application/x-ndjson');
    expect(again.body).toBe(`${lines.at(-1)}\n`);
    expect(JSON.parse(again.body).type).toBe('result');
    expect(test.provider().execs).toHaveLength(1);
    // The same key unstreamed is another request.
    expect((await test.send(exec(id), 'stream-1')).json().error.code).toBe('IDEMPOTENCY_KEY_MISMATCH');
  });

  it('tells a repeat whose answer was too large to keep so, and does not run it again', async () => {
    const test = await setUp();
    const id = (await test.send(CREATE)).json().id as string;
    // The memory provider echoes its argv: an answer over the 4 MiB kept for a repeat.
    const big = exec(id, ['echo', ...Array.from({ length: 80 }, () => 'x'.repeat(60_000))]);
    const first = await test.send(big, 'big');
    expect(first.statusCode).toBe(200);
    expect(first.body.length).toBeGreaterThan(MAX_ANSWER_BYTES);
    const again = await test.send(big, 'big');
    expect(again.statusCode).toBe(409);
    expect(again.json().error).toMatchObject({
      code: 'IDEMPOTENT_OUTCOME_UNKNOWN',
      details: { reason: 'answer-not-kept' },
    });
    expect(test.provider().execs).toHaveLength(1);
  });

  it('frees the key of a streamed exec whose sandbox was gone before it ran', async () => {
    const test = await setUp();
    const streamed = {
      ...exec('sbx-doesnotexist1'),
      url: '/v1/sandboxes/sbx-doesnotexist1/exec?stream=ndjson',
    };
    expect((await test.send(streamed, 's')).statusCode).toBe(404);
    const id = (await test.send(CREATE)).json().id as string;
    const retried = await test.send({ ...streamed, url: `/v1/sandboxes/${id}/exec?stream=ndjson` }, 's');
    expect(retried.statusCode).toBe(200);
    expect(test.provider().execs).toHaveLength(1);
  });

  it('lets exactly one waiting repeat run when the first was refused and freed the key', async () => {
    const test = await setUp();
    const id = (await test.send(CREATE)).json().id as string;
    const provider = test.provider();
    let calls = 0;
    let release = () => {};
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    const exec0 = provider.exec.bind(provider);
    // The first call waits, then is refused as not ready (409: it did nothing); later calls run.
    provider.exec = async (sandbox, request) => {
      calls += 1;
      if (calls === 1) {
        await held;
        throw new GymError('SANDBOX_NOT_READY', 'not yet');
      }
      return exec0(sandbox, request);
    };
    const first = test.send(exec(id), 'wake');
    await waitFor('the first exec to reach the provider', () => calls === 1 || undefined);
    const repeats = [test.send(exec(id), 'wake'), test.send(exec(id), 'wake'), test.send(exec(id), 'wake')];
    const entry = entryId('token', 'wake');
    await waitFor(
      'the repeats to wait',
      () => test.daemon().idempotency.get(entry)?.waiting === 3 || undefined,
    );
    release();
    expect((await first).statusCode).toBe(409);
    const answers = await Promise.all(repeats);
    expect(answers.map((answer) => answer.statusCode)).toEqual([200, 200, 200]);
    expect(answers.filter((answer) => answer.headers['idempotent-replayed'] === 'true')).toHaveLength(2);
    expect(calls).toBe(2);
  });

  it('refuses a malformed key', async () => {
    const test = await setUp();
    for (const key of ['', 'with space', 'x'.repeat(256), 'é']) {
      const refused = await test.send(CREATE, key);
      expect(refused.statusCode, key).toBe(400);
      expect(refused.json().error.message).toContain('Idempotency-Key');
    }
    expect(test.provider().sandboxes.size).toBe(0);
  });
});
