import { afterEach, describe, expect, it } from 'vitest';
import { GymError } from '../../core/errors.ts';
import { aggregateLines } from '../../environments/runner/eval-metrics.ts';
import { RunAdmission } from './admission.ts';
import { buildRolloutServer } from './rollout-server.ts';
import { RunKeys } from './run-keys.ts';

type Json = Record<string, unknown>;
const TOKEN = 'serve-test-token-0123456789';

/** A runner whose rows end only when the test opens the gate; it counts the rows it ran. */
function gatedRunner() {
  let open: () => void = () => {};
  let gate = new Promise<void>((resolve) => {
    open = resolve;
  });
  const ran: Json[] = [];
  return {
    ran,
    open: () => open(),
    close() {
      gate = new Promise<void>((resolve) => {
        open = resolve;
      });
    },
    async runRow(row: Json): Promise<Json> {
      ran.push(row);
      await gate;
      if (row.bad === true) throw new GymError('VALIDATION_FAILED', 'row 1 is not a valid mcqa task');
      return { ...row, reward: 1, mask_sample: false, failure_reason: null };
    },
  };
}

function server(
  runner: ReturnType<typeof gatedRunner>,
  concurrency = 2,
  queue = 3,
  token: string | null = TOKEN,
) {
  const admission = new RunAdmission({ concurrency, queue });
  const keys = new RunKeys();
  const app = buildRolloutServer({
    runRow: (row) => runner.runRow(row),
    aggregate: (lines) => aggregateLines(lines, 'agent'),
    admission,
    keys,
    token: token ?? undefined,
  });
  return { app, admission, keys };
}

const auth = { authorization: `Bearer ${TOKEN}` };
const apps: Array<{ close(): Promise<unknown> }> = [];
afterEach(async () => {
  for (const app of apps.splice(0)) await app.close();
});

/** Resolves once `predicate` holds, polling the event loop (never a timed assertion). */
async function until(predicate: () => boolean): Promise<void> {
  while (!predicate()) await new Promise((resolve) => setImmediate(resolve));
}

describe('gym serve: POST /run', () => {
  it("answers a row with the runner's line", async () => {
    const runner = gatedRunner();
    runner.open();
    const { app } = server(runner);
    apps.push(app);
    const reply = await app.inject({
      method: 'POST',
      url: '/run',
      headers: auth,
      payload: { id: 'q1', _ng_task_index: 0 },
    });
    expect(reply.statusCode).toBe(200);
    expect(reply.json()).toEqual({
      id: 'q1',
      _ng_task_index: 0,
      reward: 1,
      mask_sample: false,
      failure_reason: null,
    });
  });

  it('refuses every route but /healthz without the token, before anything runs', async () => {
    const runner = gatedRunner();
    runner.open();
    const { app } = server(runner);
    apps.push(app);
    for (const headers of [{}, { authorization: 'Bearer wrong' }, { authorization: TOKEN }]) {
      const reply = await app.inject({ method: 'POST', url: '/run', headers, payload: { id: 'q1' } });
      expect(reply.statusCode).toBe(401);
      expect(reply.json().error.code).toBe('UNAUTHORIZED');
      expect((await app.inject({ method: 'GET', url: '/status', headers })).statusCode).toBe(401);
    }
    expect(runner.ran).toEqual([]);
    expect((await app.inject({ method: 'GET', url: '/healthz' })).json()).toEqual({ status: 'ok' });
  });

  it('past its capacity refuses at once with 429 and Retry-After: a burst of 10,000 rows never queues', async () => {
    const runner = gatedRunner();
    const { app, admission } = server(runner, 2, 3);
    apps.push(app);
    const row = { id: 'q', padding: 'x'.repeat(4096) };
    const settled: Array<{ statusCode: number; headers: Json; json(): Json }> = [];
    const replies = Array.from({ length: 10_000 }, (_, index) =>
      app
        .inject({ method: 'POST', url: '/run', headers: auth, payload: { ...row, _ng_rollout_index: index } })
        .then((reply) => {
          settled.push(reply as unknown as (typeof settled)[number]);
          return reply;
        }),
    );
    // While no row can end: everything past 2 running and 3 waiting is answered, none held.
    await until(() => settled.length === 10_000 - 5);
    expect(runner.ran).toHaveLength(2);
    expect(admission.state()).toEqual({ running: 2, waiting: 3 });
    expect(new Set(settled.map((reply) => reply.statusCode))).toEqual(new Set([429]));
    expect(settled[0]!.headers['retry-after']).toMatch(/^[1-9]\d*$/);
    expect(settled[0]!.json().error).toMatchObject({
      code: 'CAPACITY_EXCEEDED',
      details: { running: 2, waiting: 3 },
    });
    runner.open();
    const statuses = (await Promise.all(replies)).map((reply) => reply.statusCode);
    expect(statuses.filter((status) => status === 200)).toHaveLength(5);
    expect(runner.ran).toHaveLength(5);
    expect(admission.state()).toEqual({ running: 0, waiting: 0 });
  });

  it('runs a row sent twice with one Idempotency-Key once, and answers both with the first answer', async () => {
    const runner = gatedRunner();
    const { app } = server(runner);
    apps.push(app);
    const headers = { ...auth, 'idempotency-key': 'row-7' };
    const first = app.inject({ method: 'POST', url: '/run', headers, payload: { id: 'q7' } });
    await until(() => runner.ran.length === 1);
    // A retry while the first still runs waits for it; it takes no turn of its own.
    const whileRunning = app.inject({ method: 'POST', url: '/run', headers, payload: { id: 'q7' } });
    runner.open();
    const answers = await Promise.all([first, whileRunning]);
    const after = await app.inject({ method: 'POST', url: '/run', headers, payload: { id: 'q7' } });
    expect(runner.ran).toHaveLength(1);
    expect([...answers, after].map((reply) => reply.json())).toEqual(Array(3).fill(answers[0]!.json()));
    expect(after.headers['idempotent-replayed']).toBe('true');
    const other = await app.inject({ method: 'POST', url: '/run', headers, payload: { id: 'q8' } });
    expect(other.statusCode).toBe(422);
    expect(other.json().error.code).toBe('IDEMPOTENCY_KEY_MISMATCH');
    expect(runner.ran).toHaveLength(1);
  });

  it('forgets a key whose row was refused or failed, so the row can be sent again', async () => {
    const runner = gatedRunner();
    const { app } = server(runner, 1, 0);
    apps.push(app);
    const busy = app.inject({ method: 'POST', url: '/run', headers: auth, payload: { id: 'busy' } });
    await until(() => runner.ran.length === 1);
    const headers = { ...auth, 'idempotency-key': 'k' };
    expect(
      (await app.inject({ method: 'POST', url: '/run', headers, payload: { id: 'q1' } })).statusCode,
    ).toBe(429);
    runner.open();
    await busy;
    const sent = await app.inject({ method: 'POST', url: '/run', headers, payload: { id: 'q1' } });
    expect(sent.statusCode).toBe(200);
    const bad = { ...auth, 'idempotency-key': 'bad' };
    expect(
      (await app.inject({ method: 'POST', url: '/run', headers: bad, payload: { bad: true } })).statusCode,
    ).toBe(400);
    expect(
      (await app.inject({ method: 'POST', url: '/run', headers: bad, payload: { bad: true } })).statusCode,
    ).toBe(400);
    expect(runner.ran.filter((row) => row.bad === true)).toHaveLength(2);
  });

  it('refuses a body that is no row', async () => {
    const runner = gatedRunner();
    runner.open();
    const { app } = server(runner, 1, 0, null);
    apps.push(app);
    for (const payload of ['[1]', '"row"', '{"a":'])
      expect(
        (
          await app.inject({
            method: 'POST',
            url: '/run',
            headers: { 'content-type': 'application/json' },
            payload,
          })
        ).statusCode,
      ).toBe(400);
    expect(runner.ran).toEqual([]);
  });
});

describe('gym serve: POST /aggregate_metrics', () => {
  it("answers NeMo Gym's AggregateMetrics of the lines sent back, leaving out infra errors", async () => {
    const runner = gatedRunner();
    const { app } = server(runner);
    apps.push(app);
    const line = (task: number, reward: number, outcome: string) => ({
      _ng_task_index: task,
      _ng_rollout_index: 0,
      reward,
      mask_sample: outcome === 'infra_error',
      _gym: { outcome },
    });
    const reply = await app.inject({
      method: 'POST',
      url: '/aggregate_metrics',
      headers: auth,
      payload: {
        verify_responses: [line(0, 1, 'reward'), line(1, 0, 'agent_error'), line(2, 0, 'infra_error')],
      },
    });
    expect(reply.statusCode).toBe(200);
    const metrics = reply.json();
    expect(metrics.agent_metrics['mean/reward']).toBe(0.5);
    expect(metrics.key_metrics['mean/reward']).toBe(0.5);
    expect(metrics.group_level_metrics).toHaveLength(2);
    expect(
      (await app.inject({ method: 'POST', url: '/aggregate_metrics', headers: auth, payload: {} }))
        .statusCode,
    ).toBe(400);
  });
});

describe('gym serve over a socket', () => {
  it('does not run a row whose sender gave up while it waited', async () => {
    const runner = gatedRunner();
    const { app, admission } = server(runner, 1, 2);
    apps.push(app);
    const url = await app.listen({ host: '127.0.0.1', port: 0 });
    const send = (id: string, signal?: AbortSignal) =>
      fetch(`${url}/run`, {
        method: 'POST',
        headers: { ...auth, 'content-type': 'application/json' },
        body: JSON.stringify({ id }),
        ...(signal === undefined ? {} : { signal }),
      });
    const first = send('first');
    await until(() => runner.ran.length === 1);
    const abort = new AbortController();
    const abandoned = send('abandoned', abort.signal).catch((error: unknown) => error);
    await until(() => admission.state().waiting === 1);
    abort.abort();
    await abandoned;
    const kept = send('kept');
    await until(() => admission.state().waiting === 2);
    runner.open();
    expect((await first).status).toBe(200);
    expect((await kept).status).toBe(200);
    expect(runner.ran.map((row) => row.id)).toEqual(['first', 'kept']);
    expect(admission.state()).toEqual({ running: 0, waiting: 0 });
  });
});
