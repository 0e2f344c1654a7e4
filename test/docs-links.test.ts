/**
 * The README is a short front door and `docs/` holds one page per subject; these tests keep the
 * two joined: every relative link and anchor resolves, every page is reachable from the README,
 * and the tables that restate code (error codes, the configuration example) still match it.
 * No Docker, no network: files only.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { ERROR_CODES } from '../core/errors.ts';
import { DaemonConfigSchema } from '../daemon/config.ts';
import { anchorsOf, brokenLinks, githubSlug, linksOf, markdownFilesUnder } from './markdown-links.ts';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const readme = join(root, 'README.md');
const docsPages = markdownFilesUnder(join(root, 'docs'));
const folderReadmes = ['python', 'environments'].flatMap((folder) =>
  markdownFilesUnder(join(root, folder)).filter((path) => path.endsWith('/README.md')),
);
const README_MAX_LINES = 300;

const describeBroken = (broken: ReturnType<typeof brokenLinks>) =>
  broken.map(({ file, line, target, reason }) => `${file}:${line}: ${target} (${reason})`);

describe('the docs', () => {
  it('has relative links and anchors that all resolve, in the README, docs/ and the folder READMEs', () => {
    expect(docsPages.length).toBeGreaterThan(10);
    expect(describeBroken(brokenLinks(root, [readme, ...docsPages, ...folderReadmes]))).toEqual([]);
  });

  it(`keeps the README a front door, under ${README_MAX_LINES} lines`, () => {
    const lines = readFileSync(readme, 'utf8').trimEnd().split('\n').length;
    expect(lines).toBeLessThan(README_MAX_LINES);
  });

  it('reaches every page under docs/ from the README by links', () => {
    const reached = new Set<string>([readme]);
    const queue = [readme];
    for (let file = queue.shift(); file !== undefined; file = queue.shift()) {
      for (const { target } of linksOf(readFileSync(file, 'utf8'))) {
        if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue;
        const path = target.split('#')[0] ?? '';
        if (!path.endsWith('.md')) continue;
        const next = resolve(dirname(file), decodeURIComponent(path));
        if (!reached.has(next) && docsPages.includes(next)) {
          reached.add(next);
          queue.push(next);
        }
      }
    }
    expect(docsPages.filter((page) => !reached.has(page)).map((page) => relative(root, page))).toEqual([]);
  });

  it('lists in docs/api.md exactly the error codes of core/errors.ts, with their HTTP status', () => {
    const api = readFileSync(join(root, 'docs/api.md'), 'utf8');
    const errors = api.slice(api.indexOf('\n## Errors'));
    const documented = Object.fromEntries(
      [...errors.matchAll(/^\| `([A-Z_]+)` \| (\d{3}) \|/gm)].map((row) => [row[1], Number(row[2])]),
    );
    const actual = Object.fromEntries(
      Object.entries(ERROR_CODES).map(([code, { httpStatus }]) => [code, httpStatus]),
    );
    expect(documented).toEqual(actual);
  });

  it('shows in docs/configuration.md a configuration the daemon accepts', () => {
    const page = readFileSync(join(root, 'docs/configuration.md'), 'utf8');
    const block = /```yaml\n([\s\S]*?)```/.exec(page);
    expect(block).not.toBeNull();
    const parsed = DaemonConfigSchema.safeParse(parseYaml(block?.[1] ?? ''));
    expect(parsed.success ? [] : parsed.error.issues).toEqual([]);
  });
});

describe('the link checker', () => {
  const directory = mkdtempSync(join(tmpdir(), 'gym-doc-links-'));
  afterAll(() => rmSync(directory, { recursive: true, force: true }));

  it('slugs headings as GitHub does', () => {
    expect(githubSlug('Running evaluations: `gym eval`')).toBe('running-evaluations-gym-eval');
    expect(githubSlug("NeMo Gym's files")).toBe('nemo-gyms-files');
    expect(githubSlug('Timeouts, per provider')).toBe('timeouts-per-provider');
    expect(githubSlug('From Python, and as a [NeMo Gym](x.md) provider')).toBe(
      'from-python-and-as-a-nemo-gym-provider',
    );
    expect(githubSlug('snake_case and 3a / 4a')).toBe('snake_case-and-3a--4a');
    expect([...anchorsOf('# A\n## A\n```\n# not a heading\n```\n<a id="kept"></a>\n')]).toEqual([
      'a',
      'a-1',
      'kept',
    ]);
  });

  it('names the file, line and reason of every broken link, and only those', () => {
    mkdirSync(join(directory, 'docs/sub'), { recursive: true });
    writeFileSync(join(directory, 'docs/sub/page.md'), '# Page\n\n## Some section\n');
    writeFileSync(join(directory, 'docs/data.txt'), 'data\n');
    const index = join(directory, 'README.md');
    writeFileSync(
      index,
      [
        '# Index',
        '[good](docs/sub/page.md) [good anchor](docs/sub/page.md#some-section) [here](#index)',
        '[folder](docs/sub/) [external](https://example.invalid/nowhere) `[in code](missing.md)`',
        '```',
        '[in a fence](missing.md)',
        '```',
        '[missing](docs/missing.md) [bad anchor](docs/sub/page.md#no-such) ![image](img.png)',
        '[anchor into text](docs/data.txt#x) [rooted](/docs/sub/page.md)',
        '[ref]: docs/gone.md',
      ].join('\n'),
    );
    expect(describeBroken(brokenLinks(directory, [index]))).toEqual([
      'README.md:7: docs/missing.md (no such file: docs/missing.md)',
      'README.md:7: docs/sub/page.md#no-such (no heading #no-such in docs/sub/page.md)',
      'README.md:7: img.png (no such file: img.png)',
      'README.md:8: docs/data.txt#x (an anchor into docs/data.txt, which is not a markdown file)',
      'README.md:9: docs/gone.md (no such file: docs/gone.md)',
    ]);
  });
});
