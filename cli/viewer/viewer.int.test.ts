/**
 * The viewer's page in a real headless Chromium: it loads through the one-time login link, its
 * filters narrow the table, a rollout opens step by step, hostile agent text stays text, and a
 * growing results file shows up live. Screenshots go to a temporary folder the test prints (and
 * to GYM_VIEWER_SCREENSHOTS_DIR when set).
 */
import { appendFile, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../../core/logger.ts';
import type { ProviderContext } from '../../providers/sandbox-provider.ts';
import { startTestDaemon } from '../../test/daemon-harness.ts';
import { MemoryProvider } from '../../test/fixtures/memory-provider.ts';
import { HOSTILE_TEXT, writeViewerResults } from '../../test/fixtures/viewer-results.ts';
import { chromiumSkipReason, type HeadlessChromium, launchChromium } from '../../test/headless-chromium.ts';
import { daemonUiCommand } from '../commands/daemon/ui.ts';
import { buildViewerServer, type ViewerServer } from './server.ts';

const skipReason = chromiumSkipReason();

describe.skipIf(skipReason !== undefined)('gym eval view in headless Chromium', () => {
  let folder: string;
  let shots: string;
  let browser: HeadlessChromium;
  const servers: ViewerServer[] = [];

  const serve = async (resultsPath: string) => {
    const viewer = await buildViewerServer({ resultsPath });
    servers.push(viewer);
    return `${await viewer.listen(0)}${viewer.loginPath}`;
  };
  const saveShot = async (name: string, png: Buffer) => {
    await writeFile(join(shots, name), png);
    const extra = process.env.GYM_VIEWER_SCREENSHOTS_DIR;
    if (extra !== undefined && extra !== '') {
      await mkdir(extra, { recursive: true });
      await writeFile(join(extra, name), png);
    }
  };
  const rowTasks = () =>
    browser.page.evaluate<string[]>(
      "[...document.querySelectorAll('#rollouts tbody tr td:first-child')].map((cell) => cell.textContent)",
    );

  beforeAll(async () => {
    folder = await mkdtemp(join(tmpdir(), 'gym-viewer-'));
    shots = join(folder, 'screenshots');
    await mkdir(shots);
    console.log(`viewer screenshots: ${shots}`);
    browser = await launchChromium();
  });
  afterAll(async () => {
    await browser?.close();
    for (const server of servers) await server.app.close();
  });

  it('loads the run, filters the table by task, outcome and reward, and opens a rollout step by step', async () => {
    const { resultsPath, lineCount } = await writeViewerResults(folder);
    const page = browser.page;
    await page.navigate(await serve(resultsPath));
    await page.waitUntil(
      'the table',
      `document.querySelectorAll('#rollouts tbody tr').length === ${lineCount}`,
    );
    expect(await page.evaluate('location.pathname')).toBe('/');
    expect(await page.evaluate("document.querySelector('#status').textContent")).toMatch(
      /^Finished: 10 rollouts, 1 failed/,
    );
    expect(await page.evaluate("document.querySelector('#metrics').textContent")).toContain('pass@2/reward');
    // The chart: one bar per reward value (0 and 1), drawn as SVG.
    expect(await page.evaluate("document.querySelectorAll('#reward-chart svg rect').length")).toBe(2);
    expect(await page.evaluate("document.querySelector('#failures-table').textContent")).toContain(
      'verifier_timeout',
    );
    await saveShot('run.png', await page.screenshot());

    // By task, typed as a person would.
    await page.evaluate("document.querySelector('#filter-task').focus()");
    await page.type('money');
    expect(await rowTasks()).toEqual(['money-1', 'money-1']);
    expect(await page.evaluate("document.querySelector('#rollouts-count').textContent")).toBe(
      `2 of ${lineCount} rollouts shown`,
    );
    // And by reward: the one that passed.
    await page.evaluate("document.querySelector('#filter-reward-min').focus()");
    await page.type('1');
    expect(await rowTasks()).toEqual(['money-1']);
    // By outcome alone: the line an earlier version wrote.
    await page.evaluate(`(() => {
      document.querySelector('#filter-task').value = '';
      document.querySelector('#filter-reward-min').value = '';
      const outcome = document.querySelector('#filter-outcome');
      outcome.value = 'agent_error';
      outcome.dispatchEvent(new Event('input', { bubbles: true }));
    })()`);
    expect(await rowTasks()).toEqual(['legacy-task']);

    // Open the hostile rollout from the keyboard.
    await page.evaluate(`(() => {
      const outcome = document.querySelector('#filter-outcome');
      outcome.value = '';
      outcome.dispatchEvent(new Event('input', { bubbles: true }));
      [...document.querySelectorAll('#rollouts a')].find((link) => link.textContent === 'parser-2').focus();
    })()`);
    await page.pressKey('Enter');
    await page.waitUntil(
      'the rollout',
      "document.querySelector('#rollout-heading').textContent === 'parser-2, repeat 0'",
    );
    expect(await page.evaluate("document.querySelectorAll('ol.steps > li').length")).toBe(2);
    expect(await page.evaluate("document.querySelector('pre.command').textContent")).toBe(
      `echo '${HOSTILE_TEXT}'`,
    );
    expect(await page.evaluate("document.querySelectorAll('#model-calls tbody tr').length")).toBe(2);
    expect(await page.evaluate("document.querySelector('#model-calls tbody').textContent")).toContain(
      'scripted-model',
    );
    expect(await page.evaluate("document.querySelectorAll('#rollout svg rect').length")).toBe(7);
    expect(await page.evaluate("document.querySelector('#verifier').textContent")).toContain('FAIL_TO_PASS');
    // The agent's markup is shown as text: nothing of it became an element or ran.
    expect(
      await page.evaluate(
        "document.querySelector('#injected') === null && document.querySelectorAll('main img, main script').length === 0",
      ),
    ).toBe(true);
    expect(await page.evaluate('document.title')).toBe('parser-2 – gym eval view');
    expect(await page.evaluate('document.activeElement.id')).toBe('rollout-heading');
    await saveShot('rollout.png', await page.screenshot());

    await page.evaluate("location.hash = '#/'");
    await page.waitUntil('the run page again', "!document.querySelector('#run-page').hidden");
    expect(page.errors).toEqual([]);
  });

  it('refuses the spent login link, and shows a run in flight as its file grows', async () => {
    const live = join(folder, 'live');
    await mkdir(live);
    const { resultsPath } = await writeViewerResults(live, { withMetrics: false });
    const lines = (await readFile(resultsPath, 'utf8')).split('\n').filter((line) => line !== '');
    const [first, second] = lines;
    await writeFile(resultsPath, `${first}\n`);
    // What gym eval run writes before any rollout: every (task, repeat) it will run.
    await writeFile(
      join(live, 'results_materialized_inputs.jsonl'),
      [0, 1, 2, 3]
        .map((task) => `${JSON.stringify({ _ng_task_index: task, _ng_rollout_index: 0 })}\n`)
        .join(''),
    );
    const page = browser.page;
    const login = await serve(resultsPath);
    await page.navigate(login);
    await page.waitUntil('one row', "document.querySelectorAll('#rollouts tbody tr').length === 1");
    expect(await page.evaluate("document.querySelector('#status').textContent")).toMatch(
      /^In progress: 1 of 4 rollouts written, 1 failed/,
    );
    await appendFile(resultsPath, `${second}\n`);
    await page.waitUntil(
      'the new row',
      "document.querySelectorAll('#rollouts tbody tr').length === 2",
      10_000,
    );
    expect(await rowTasks()).toEqual(['money-1', 'money-1']);
    expect(await page.evaluate("document.querySelector('#status').textContent")).toMatch(
      /^In progress: 2 of 4/,
    );

    await page.navigate(login);
    expect(await page.evaluate('document.body.textContent')).toMatch(/not valid or was used already/);
    await rm(live, { recursive: true, force: true });
  });

  it("shows the daemon's sandboxes at /ui through the link gym daemon ui prints", async () => {
    const daemon = await startTestDaemon(
      { providers: [{ name: 'memory' }] },
      {
        listen: true,
        factories: {
          memory: (_options: unknown, context: ProviderContext) => new MemoryProvider(context, {}),
        },
      },
    );
    try {
      const created = await daemon.app.inject({
        method: 'POST',
        url: '/v1/sandboxes',
        headers: daemon.auth,
        payload: { image: 'gym/debian-base:latest', labels: { run: 'eval-1' } },
      });
      const id = (created.json() as { id: string }).id;
      const stdout = new PassThrough();
      let printed = '';
      stdout.on('data', (chunk: Buffer) => {
        printed += chunk.toString();
      });
      const code = await daemonUiCommand.run({
        options: { stateDir: daemon.stateDir },
        args: [],
        env: {},
        stdout,
        stderr: new PassThrough(),
        logger: silentLogger,
      });
      expect(code).toBe(0);
      const link = /open (\S+)/.exec(printed)![1]!;
      expect(link).not.toContain(daemon.token);
      const page = browser.page;
      await page.navigate(link);
      await page.waitUntil(
        'the sandbox row',
        `document.querySelector('#sandboxes tbody').textContent.includes(${JSON.stringify(id)})`,
      );
      expect(await page.evaluate('location.pathname')).toBe('/ui/');
      expect(await page.evaluate("document.querySelector('#sandboxes tbody').textContent")).toContain(
        'run=eval-1',
      );
      // The page's session reads /ui and nothing else of the API.
      expect(await page.evaluate("fetch('/v1/sandboxes').then((response) => response.status)")).toBe(401);
      await saveShot('daemon.png', await page.screenshot());
    } finally {
      await daemon.cleanup();
    }
  });
});
