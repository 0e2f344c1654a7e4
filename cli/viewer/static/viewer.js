// The results viewer's page. Everything it shows came from a results file, that is from agents,
// models and verifiers: it is only ever put in the page as text (textContent, text nodes,
// attribute values), never parsed as markup. No inline code: the page's policy allows only this file.

const SVG = 'http://www.w3.org/2000/svg';
const POLL_MS = 2000;
const state = { run: undefined, pollTimer: undefined };

/** An element with attributes and children; a string child is a text node, never markup. */
function element(tag, attributes, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes ?? {})) {
    if (value !== undefined && value !== null && value !== false) node.setAttribute(name, String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(
      typeof child === 'string' || typeof child === 'number' ? document.createTextNode(String(child)) : child,
    );
  }
  return node;
}

function svgElement(tag, attributes, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

const byId = (id) => document.getElementById(id);
const formatNumber = (value, digits = 2) =>
  value === null || value === undefined
    ? '–'
    : Number.isInteger(value)
      ? String(value)
      : value.toFixed(digits);
const formatMs = (ms) =>
  ms === null || ms === undefined ? '–' : ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(1)} s`;
const outcomeClass = (outcome, reward) =>
  reward === 1
    ? 'outcome-pass'
    : outcome === 'reward' && reward === 0
      ? 'outcome-fail'
      : outcome === 'reward'
        ? ''
        : 'outcome-other';

async function getJson(path) {
  const response = await fetch(path, { credentials: 'same-origin', headers: { accept: 'application/json' } });
  if (!response.ok) throw new Error(`${path}: ${response.status} ${(await response.text()).trim()}`);
  return response.json();
}

// ---- the run page ----------------------------------------------------------------------------

function renderMetrics(run) {
  const list = byId('metrics');
  const entries = Object.entries(run.metrics);
  const wanted = entries.filter(
    ([name]) => /^(pass@|mean\/|rate\/|majority@)/.test(name) && !/std_dev|std_err/.test(name),
  );
  const shown = wanted.length > 0 ? wanted : entries;
  list.replaceChildren(
    element('dt', {}, 'rollouts'),
    element('dd', {}, String(run.rollouts.length)),
    element('dt', {}, 'failures'),
    element('dd', {}, String(run.failures.length)),
    ...shown
      .slice(0, 24)
      .flatMap(([name, value]) => [element('dt', {}, name), element('dd', {}, formatNumber(value, 3))]),
  );
  byId('metrics-source').textContent = `Metrics: ${run.metricsSource}.`;
}

/** A histogram of the rewards, drawn here: one bar per value when there are few, else ten bins. */
function renderRewardChart(rollouts) {
  const rewards = rollouts.map((rollout) => rollout.reward).filter((reward) => reward !== null);
  const container = byId('reward-chart');
  if (rewards.length === 0) {
    container.replaceChildren(element('p', { class: 'note' }, 'No rewards yet.'));
    return;
  }
  const distinct = [...new Set(rewards)].sort((left, right) => left - right);
  let bins;
  if (distinct.length <= 10) {
    bins = distinct.map((value) => ({
      label: formatNumber(value),
      count: rewards.filter((reward) => reward === value).length,
    }));
  } else {
    const low = distinct[0];
    const width = (distinct.at(-1) - low) / 10;
    bins = Array.from({ length: 10 }, (_, index) => ({ label: formatNumber(low + index * width), count: 0 }));
    for (const reward of rewards) bins[Math.min(9, Math.floor((reward - low) / width))].count += 1;
  }
  const chartWidth = 360;
  const chartHeight = 160;
  const top = Math.max(...bins.map((bin) => bin.count));
  const barWidth = (chartWidth - 40) / bins.length;
  const summary = bins.map((bin) => `${bin.count} with reward ${bin.label}`).join(', ');
  const svg = svgElement('svg', {
    width: chartWidth,
    height: chartHeight + 40,
    viewBox: `0 0 ${chartWidth} ${chartHeight + 40}`,
    role: 'img',
    'aria-labelledby': 'reward-chart-title',
  });
  svg.append(svgElement('title', { id: 'reward-chart-title' }, `Reward distribution: ${summary}`));
  svg.append(
    svgElement('line', { x1: 30, y1: chartHeight, x2: chartWidth - 5, y2: chartHeight, stroke: '#4a4a4a' }),
  );
  bins.forEach((bin, index) => {
    const height = top === 0 ? 0 : (bin.count / top) * (chartHeight - 20);
    const x = 35 + index * barWidth;
    svg.append(
      svgElement('rect', {
        x,
        y: chartHeight - height,
        width: Math.max(2, barWidth - 6),
        height,
        fill: '#0b57d0',
      }),
      svgElement(
        'text',
        { x: x + (barWidth - 6) / 2, y: chartHeight - height - 4, 'text-anchor': 'middle' },
        String(bin.count),
      ),
      svgElement(
        'text',
        { x: x + (barWidth - 6) / 2, y: chartHeight + 14, 'text-anchor': 'middle' },
        bin.label,
      ),
    );
  });
  svg.append(
    svgElement('text', { x: chartWidth / 2, y: chartHeight + 32, 'text-anchor': 'middle' }, 'reward'),
  );
  container.replaceChildren(svg);
  byId('reward-caption').textContent = `Reward distribution of ${rewards.length} rollouts`;
}

function currentFilters() {
  const number = (id) => {
    const text = byId(id).value.trim();
    return text === '' || !Number.isFinite(Number(text)) ? undefined : Number(text);
  };
  return {
    task: byId('filter-task').value.trim().toLowerCase(),
    outcome: byId('filter-outcome').value,
    rewardMin: number('filter-reward-min'),
    rewardMax: number('filter-reward-max'),
  };
}

function matches(rollout, filters) {
  if (filters.task !== '' && !rollout.task.toLowerCase().includes(filters.task)) return false;
  if (filters.outcome !== '' && rollout.outcome !== filters.outcome) return false;
  if (filters.rewardMin !== undefined && !(rollout.reward !== null && rollout.reward >= filters.rewardMin))
    return false;
  if (filters.rewardMax !== undefined && !(rollout.reward !== null && rollout.reward <= filters.rewardMax))
    return false;
  return true;
}

function renderOutcomeOptions(rollouts) {
  const select = byId('filter-outcome');
  const chosen = select.value;
  const outcomes = [...new Set(rollouts.map((rollout) => rollout.outcome))].sort();
  select.replaceChildren(
    element('option', { value: '' }, 'any'),
    ...outcomes.map((outcome) => element('option', { value: outcome }, outcome)),
  );
  select.value = outcomes.includes(chosen) ? chosen : '';
}

function renderTable() {
  const run = state.run;
  if (run === undefined) return;
  const filters = currentFilters();
  const shown = run.rollouts.filter((rollout) => matches(rollout, filters));
  byId('rollouts').tBodies[0].replaceChildren(
    ...shown.map((rollout) =>
      element(
        'tr',
        { 'data-position': rollout.position },
        element('td', {}, element('a', { href: `#/rollout/${rollout.position}` }, rollout.task)),
        element('td', {}, String(rollout.rolloutIndex)),
        element('td', { class: outcomeClass(rollout.outcome, rollout.reward) }, rollout.outcome),
        element('td', { class: 'number' }, formatNumber(rollout.reward)),
        element('td', { class: 'number' }, String(rollout.steps)),
        element('td', { class: 'number' }, String(rollout.modelCalls)),
        element(
          'td',
          { class: 'number' },
          `${formatNumber(rollout.inputTokens)} / ${formatNumber(rollout.outputTokens)}`,
        ),
        element('td', { class: 'number' }, formatNumber(rollout.costUsd, 4)),
        element('td', { class: 'number' }, formatMs(rollout.totalMs)),
      ),
    ),
  );
  byId('rollouts-count').textContent = `${shown.length} of ${run.rollouts.length} rollouts shown`;
}

function renderFailures(failures) {
  const container = byId('failures');
  if (failures.length === 0) {
    container.replaceChildren(element('p', {}, 'None.'));
    return;
  }
  container.replaceChildren(
    element(
      'table',
      { id: 'failures-table' },
      element(
        'thead',
        {},
        element(
          'tr',
          {},
          ['Task', 'Repeat', 'Class', 'Message'].map((name) => element('th', { scope: 'col' }, name)),
        ),
      ),
      element(
        'tbody',
        {},
        failures.map((failure) =>
          element(
            'tr',
            {},
            element('td', {}, failure.task),
            element('td', {}, failure.rolloutIndex === null ? '–' : String(failure.rolloutIndex)),
            element('td', { class: 'outcome-other' }, failure.failureClass),
            element('td', {}, element('pre', {}, failure.message)),
          ),
        ),
      ),
    ),
  );
}

function renderStatus(run) {
  byId('file').textContent = run.file;
  // Failures are counted apart: the failures file keeps every infra error, also of a rollout retried since.
  const failed = run.failures.length === 0 ? '' : `, ${run.failures.length} failed (no reward)`;
  byId('status').textContent = run.isComplete
    ? `Finished: ${run.rollouts.length} rollouts${failed}.`
    : run.expectedRollouts > 0
      ? `In progress: ${run.rollouts.length} of ${run.expectedRollouts} rollouts written${failed} (updates every ${POLL_MS / 1000} s).`
      : `${run.rollouts.length} rollouts${failed} (watching the file for more).`;
}

async function refreshRun() {
  try {
    const run = await getJson('/api/run');
    state.run = run;
    renderStatus(run);
    renderMetrics(run);
    renderRewardChart(run.rollouts);
    renderOutcomeOptions(run.rollouts);
    renderTable();
    renderFailures(run.failures);
    clearTimeout(state.pollTimer);
    if (!run.isComplete) state.pollTimer = setTimeout(refreshRun, POLL_MS);
  } catch (error) {
    byId('status').textContent = `Cannot read the results: ${error.message}`;
    state.pollTimer = setTimeout(refreshRun, POLL_MS * 2);
  }
}

// ---- one rollout -----------------------------------------------------------------------------

function section(title, ...children) {
  return element('section', {}, element('h3', {}, title), ...children);
}

function definitionList(pairs) {
  return element(
    'dl',
    { class: 'pairs' },
    pairs.flatMap(([name, value]) => [element('dt', {}, name), element('dd', {}, value)]),
  );
}

/** Phases from the timings, then each step and model call at its start time, on one time axis. */
function timeline(view) {
  const bars = [];
  const timings = view.timings;
  let cursor = 0;
  for (const phase of ['sandboxMs', 'agentMs', 'verifyMs']) {
    if (typeof timings[phase] === 'number') {
      bars.push({
        label: phase.replace('Ms', ''),
        start: cursor,
        duration: timings[phase],
        color: '#5f6368',
      });
      cursor += timings[phase];
    }
  }
  const agentStart = typeof timings.sandboxMs === 'number' ? timings.sandboxMs : 0;
  const at = (text) =>
    view.startedAtMs === null || text === null ? null : Date.parse(text) - view.startedAtMs + agentStart;
  for (const step of view.steps) {
    const start = at(step.startedAt);
    if (start !== null && step.durationMs !== null)
      bars.push({ label: `step ${step.index}`, start, duration: step.durationMs, color: '#0b57d0' });
  }
  for (const call of view.modelCalls) {
    const start = at(call.startedAt);
    if (start !== null && call.durationMs !== null)
      bars.push({ label: `model call ${call.index}`, start, duration: call.durationMs, color: '#146c2e' });
  }
  if (bars.length === 0) return element('p', { class: 'note' }, 'No timings recorded.');
  const end = Math.max(...bars.map((bar) => bar.start + bar.duration), 1);
  const rowHeight = 18;
  const labelWidth = 110;
  const width = 720;
  const svg = svgElement('svg', {
    width: '100%',
    viewBox: `0 0 ${width} ${bars.length * rowHeight + 24}`,
    role: 'img',
    'aria-label': `Timeline of ${bars.length} phases, steps and model calls over ${formatMs(end)}`,
  });
  bars.forEach((bar, index) => {
    const scale = (width - labelWidth - 70) / end;
    const y = index * rowHeight;
    const group = svgElement('g', {});
    group.append(
      svgElement(
        'title',
        {},
        `${bar.label}: starts at ${formatMs(bar.start)}, takes ${formatMs(bar.duration)}`,
      ),
      svgElement('text', { x: 0, y: y + 13 }, bar.label),
      svgElement('rect', {
        x: labelWidth + bar.start * scale,
        y: y + 3,
        width: Math.max(1, bar.duration * scale),
        height: rowHeight - 6,
        fill: bar.color,
      }),
      svgElement(
        'text',
        { x: labelWidth + (bar.start + bar.duration) * scale + 4, y: y + 13 },
        formatMs(bar.duration),
      ),
    );
    svg.append(group);
  });
  svg.append(svgElement('text', { x: labelWidth, y: bars.length * rowHeight + 18 }, `0 – ${formatMs(end)}`));
  return svg;
}

function renderRollout(view) {
  const summary = view.summary;
  byId('rollout-heading').textContent = `${summary.task}, repeat ${summary.rolloutIndex}`;
  const steps = view.steps.map((step) =>
    element(
      'li',
      {},
      element(
        'h4',
        {},
        `Step ${step.index}`,
        step.durationMs === null ? '' : ` (${formatMs(step.durationMs)})`,
      ),
      step.assistant === null
        ? null
        : [element('p', { class: 'label' }, 'Model'), element('pre', {}, step.assistant)],
      step.action === null
        ? null
        : [
            element('p', { class: 'label' }, `Command (${step.action.tool})`),
            element('pre', { class: 'command' }, step.action.command),
          ],
      step.observation === null
        ? null
        : [
            element(
              'p',
              { class: 'label' },
              `Output${step.exitCode === null ? '' : `, exit code ${step.exitCode}`}`,
            ),
            element('pre', {}, step.observation),
          ],
      step.error === null
        ? null
        : [element('p', { class: 'label' }, 'Error'), element('pre', {}, step.error)],
      step.inputTokens === null
        ? null
        : element('p', { class: 'note' }, `${step.inputTokens} tokens in, ${step.outputTokens ?? '–'} out`),
    ),
  );
  const calls = element(
    'table',
    { id: 'model-calls' },
    element(
      'thead',
      {},
      element(
        'tr',
        {},
        ['#', 'API', 'Model', 'Status', 'Tokens in', 'Cached', 'Tokens out', 'Time'].map((name) =>
          element('th', { scope: 'col' }, name),
        ),
      ),
    ),
    element(
      'tbody',
      {},
      view.modelCalls.map((call) =>
        element(
          'tr',
          {},
          element('td', {}, String(call.index)),
          element('td', {}, call.api),
          element('td', {}, call.model ?? '–'),
          element('td', { class: call.status === 'ok' ? '' : 'outcome-fail' }, call.error ?? call.status),
          element('td', { class: 'number' }, formatNumber(call.inputTokens)),
          element('td', { class: 'number' }, formatNumber(call.cachedTokens)),
          element('td', { class: 'number' }, formatNumber(call.outputTokens)),
          element('td', { class: 'number' }, formatMs(call.durationMs)),
        ),
      ),
    ),
  );
  byId('rollout').replaceChildren(
    definitionList([
      ['Outcome', summary.outcome],
      ['Reward', formatNumber(summary.reward)],
      ['Tokens in / out', `${formatNumber(summary.inputTokens)} / ${formatNumber(summary.outputTokens)}`],
      ['Cost (USD)', formatNumber(summary.costUsd, 4)],
      [
        'Harness',
        view.harness === null
          ? '–'
          : `${view.harness.outcome ?? '–'}${view.harness.message ? `: ${view.harness.message}` : ''}`,
      ],
    ]),
    section('Timeline', timeline(view)),
    section(
      'Prompt',
      view.prompt.length === 0
        ? element('p', { class: 'note' }, 'No prompt recorded.')
        : view.prompt.map((message) =>
            element(
              'div',
              { class: 'message' },
              element('p', { class: 'label' }, message.role),
              element('pre', {}, message.text),
            ),
          ),
    ),
    section(
      `Steps (${view.steps.length})`,
      view.steps.length === 0
        ? element('p', { class: 'note' }, 'No steps recorded.')
        : element('ol', { class: 'steps' }, steps),
    ),
    section(
      `Model calls (${view.modelCalls.length})`,
      view.modelCalls.length === 0
        ? element('p', { class: 'note' }, 'No model calls recorded.')
        : element('div', { class: 'scroll' }, calls),
    ),
    section('Final output', element('pre', { id: 'final-output' }, view.output ?? '(none)')),
    section('Verifier', element('pre', { id: 'verifier' }, JSON.stringify(view.verifier, null, 2))),
  );
}

// ---- routing ---------------------------------------------------------------------------------

async function route() {
  const match = /^#\/rollout\/(\d+)$/.exec(location.hash);
  const runPage = byId('run-page');
  const rolloutPage = byId('rollout-page');
  if (match === null) {
    rolloutPage.hidden = true;
    runPage.hidden = false;
    document.title = 'gym eval view';
    return;
  }
  runPage.hidden = true;
  rolloutPage.hidden = false;
  byId('rollout-heading').textContent = 'Loading…';
  byId('rollout').replaceChildren();
  try {
    const view = await getJson(`/api/rollouts/${match[1]}`);
    renderRollout(view);
    document.title = `${view.summary.task} – gym eval view`;
  } catch (error) {
    byId('rollout-heading').textContent = `Cannot read this rollout: ${error.message}`;
  }
  byId('rollout-heading').focus();
}

document.addEventListener('DOMContentLoaded', () => {
  for (const id of ['filter-task', 'filter-outcome', 'filter-reward-min', 'filter-reward-max'])
    byId(id).addEventListener('input', renderTable);
  byId('filters').addEventListener('submit', (event) => event.preventDefault());
  window.addEventListener('hashchange', route);
  route();
  refreshRun();
});
