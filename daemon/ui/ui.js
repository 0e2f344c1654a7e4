// The daemon's /ui page: its sandboxes and pools, re-read every few seconds. Labels, images and
// names may come from anyone who can create a sandbox: they are put in the page as text only.

const REFRESH_MS = 3000;

function cell(text, className) {
  const node = document.createElement('td');
  if (className) node.className = className;
  node.textContent = text === null || text === undefined ? '–' : String(text);
  return node;
}

function row(cells) {
  const node = document.createElement('tr');
  node.append(...cells);
  return node;
}

async function getJson(path) {
  const response = await fetch(path, { credentials: 'same-origin', headers: { accept: 'application/json' } });
  if (!response.ok) throw new Error(`${response.status} ${(await response.text()).trim()}`);
  return response.json();
}

async function refresh() {
  try {
    const [{ sandboxes }, { pools }] = await Promise.all([
      getJson('/ui/api/sandboxes'),
      getJson('/ui/api/pools'),
    ]);
    document
      .querySelector('#pools tbody')
      .replaceChildren(
        ...pools.map((pool) =>
          row([
            cell(pool.name),
            ...['idle', 'leased', 'creating', 'hits', 'misses', 'failures'].map((key) =>
              cell(pool[key], 'number'),
            ),
          ]),
        ),
      );
    document.querySelector('#sandboxes tbody').replaceChildren(
      ...sandboxes.map((sandbox) =>
        row([
          cell(sandbox.id),
          cell(sandbox.provider),
          cell(sandbox.state),
          cell(sandbox.image),
          cell(sandbox.pool),
          cell(
            Object.entries(sandbox.labels ?? {})
              .map(([key, value]) => `${key}=${value}`)
              .join(', '),
          ),
          cell(sandbox.createdAt),
          cell(sandbox.leaseExpiresAt),
        ]),
      ),
    );
    document.querySelector('#status').textContent =
      `${sandboxes.length} sandboxes, ${pools.length} pools (updated ${new Date().toLocaleTimeString()})`;
  } catch (error) {
    document.querySelector('#status').textContent = `Cannot read the daemon: ${error.message}`;
  }
  setTimeout(refresh, REFRESH_MS);
}

document.addEventListener('DOMContentLoaded', refresh);
