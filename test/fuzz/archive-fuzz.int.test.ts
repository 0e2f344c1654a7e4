/**
 * Fuzzes the upload paths (`PUT .../archive` and `PUT .../files`) of a daemon on the real Docker
 * engine with random and hostile tar archives: traversal names, links that escape (symbolic and
 * hard, through planted links in the sandbox too), long names, PAX records (path, linkpath,
 * GNU sparse, xattrs), GNU long names, sparse and device entries, truncation and flipped bytes.
 * The archives are built byte by byte here, so nothing a tar library would refuse to write is
 * out of reach.
 *
 * Properties: the daemon answers (204, a 4xx, or a documented provider failure), nothing in the
 * sandbox changes outside the target directory (the engine's own list of changed paths, and a
 * directory the planted links point to stays empty), no spooled upload is left on the host, the
 * daemon answers /healthz afterwards, and no container is left. Budget and replay: budget.ts.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, posix } from 'node:path';
import fc from 'fast-check';
import type { InjectOptions } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EXEC_HELPER_MOUNT } from '../../providers/docker/one-shot-exec.ts';
import { startTestDaemon, type TestDaemon } from '../daemon-harness.ts';
import { dockerTestEnvironment, testImage } from '../docker-available.ts';
import { fuzzParameters, fuzzTimeout } from './budget.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const busybox = skipReason === undefined ? await testImage(docker, 'busybox') : 'gym/busybox:missing';

const TARGET = '/work/dst';
/** What the planted links in the target point to: it must stay empty. */
const OUTSIDE = '/work/outside';
/** What the Docker provider itself puts in a sandbox (the exec helper's mount point). */
const DAEMON_PATHS = new Set(['/dev', EXEC_HELPER_MOUNT]);
/**
 * 5xx answers allowed: the engine down or slow. Not PROVIDER_ERROR: the engine refusing an upload
 * the daemon accepted means the check let through what the engine cannot write.
 */
const DOCUMENTED_5XX = new Set(['PROVIDER_UNAVAILABLE', 'PROVIDER_TIMEOUT']);

// ---- a tar writer that writes anything ----

function octal(value: number, width: number): string {
  return `${value.toString(8).padStart(width - 1, '0')}\0`;
}

interface RawEntry {
  name: string;
  /** The typeflag byte: '0' file, '5' directory, '2' symlink, '1' hard link, 'x' PAX, 'L' GNU long name, 'S' sparse, ... */
  type: string;
  linkname?: string;
  content?: Buffer;
  mode?: number;
  /** Overrides the size field (a lie about the content's length). */
  size?: number;
}

function header(entry: RawEntry): Buffer {
  const block = Buffer.alloc(512);
  const name = Buffer.from(entry.name);
  // Names over 100 bytes go in the ustar prefix field when they split on a slash; else they are cut.
  let prefix = Buffer.alloc(0);
  let rest = name;
  if (name.length > 100) {
    const slash = name.lastIndexOf('/', 155);
    if (slash > 0 && name.length - slash - 1 <= 100) {
      prefix = name.subarray(0, slash);
      rest = name.subarray(slash + 1);
    }
  }
  rest.copy(block, 0, 0, Math.min(rest.length, 100));
  block.write(octal(entry.mode ?? 0o644, 8), 100, 'latin1');
  block.write(octal(0, 8), 108, 'latin1');
  block.write(octal(0, 8), 116, 'latin1');
  block.write(octal(entry.size ?? entry.content?.length ?? 0, 12), 124, 'latin1');
  block.write(octal(1_700_000_000, 12), 136, 'latin1');
  block.write('        ', 148, 'latin1');
  block.write(entry.type.slice(0, 1), 156, 'latin1');
  Buffer.from(entry.linkname ?? '').copy(block, 157, 0, 100);
  block.write('ustar\u000000', 257, 'latin1');
  block.write('root', 265, 'latin1');
  block.write('root', 297, 'latin1');
  prefix.copy(block, 345, 0, 155);
  let sum = 0;
  for (const byte of block) sum += byte;
  block.write(`${sum.toString(8).padStart(6, '0')}\0 `, 148, 'latin1');
  return block;
}

function paxRecords(records: Array<[string, string]>): Buffer {
  return Buffer.concat(
    records.map(([key, value]) => {
      const body = ` ${key}=${value}\n`;
      let length = Buffer.byteLength(body) + 1;
      while (String(length).length + Buffer.byteLength(body) !== length) length += 1;
      return Buffer.from(`${length}${body}`);
    }),
  );
}

function pad(content: Buffer): Buffer {
  const remainder = content.length % 512;
  return remainder === 0 ? content : Buffer.concat([content, Buffer.alloc(512 - remainder)]);
}

function tarBytes(entries: RawEntry[], end: boolean): Buffer {
  const parts = entries.flatMap((entry) => [header(entry), pad(entry.content ?? Buffer.alloc(0))]);
  if (end) parts.push(Buffer.alloc(1024));
  return Buffer.concat(parts);
}

// ---- generators ----

const segment = fc.oneof(
  { weight: 6, arbitrary: fc.constantFrom('a', 'b', 'sub', 'f.txt', 'planted', 'planted-rel', 'l') },
  fc.constantFrom('..', '.', '', 'etc', 'passwd', 'work', 'outside', 'dst'),
  fc.constantFrom('n'.repeat(255), 'n'.repeat(256), 'ü'.repeat(128), 'ü', 'a b', 'x\\y', '-'),
  fc.stringMatching(/^[a-z.]{1,4}$/),
);
const relativePath = fc.array(segment, { minLength: 1, maxLength: 5 }).map((segments) => segments.join('/'));
const entryPath = fc.oneof(
  { weight: 5, arbitrary: relativePath },
  relativePath.map((path) => `/${path}`),
  relativePath.map((path) => `./${path}`),
  relativePath.map((path) => `${'deep/'.repeat(30)}${path}`),
  fc.constantFrom('/etc/passwd', '../outside/x', '../../etc/x', 'planted/x', 'planted-rel/x', 'l/../../x'),
);
const linkTarget = fc.oneof(
  entryPath,
  fc.constantFrom('/', '.', '..', '/work/outside', '../outside', '/etc/passwd', 'planted', 'a/../..'),
);
const PAX_KEYS = [
  'path',
  'linkpath',
  'size',
  'GNU.sparse.name',
  'GNU.sparse.major',
  'GNU.sparse.minor',
  'GNU.sparse.map',
  'GNU.sparse.realsize',
  'GNU.sparse.size',
  'SCHILY.xattr.user.fuzz',
  'SCHILY.xattr.security.capability',
  'mtime',
  'uid',
  'uname',
] as const;
const paxValue = fc.oneof(entryPath, fc.constantFrom('0', '1', '5', '-1', '0,5', '99999999999', 'x'));
const content = fc.uint8Array({ maxLength: 700 }).map((bytes) => Buffer.from(bytes));

const plainEntry: fc.Arbitrary<RawEntry[]> = fc
  .oneof(
    { weight: 4, arbitrary: fc.record({ name: entryPath, type: fc.constant('0'), content }) },
    {
      weight: 2,
      arbitrary: fc.record({ name: entryPath, type: fc.constant('5'), mode: fc.constant(0o755) }),
    },
    { weight: 3, arbitrary: fc.record({ name: entryPath, type: fc.constant('2'), linkname: linkTarget }) },
    { weight: 2, arbitrary: fc.record({ name: entryPath, type: fc.constant('1'), linkname: linkTarget }) },
    // Devices, fifos, contiguous files, GNU sparse and unknown types.
    fc.record({ name: entryPath, type: fc.constantFrom('3', '4', '6', '7', 'S', 'V', 'M', 'Z'), content }),
    // A lie about the size.
    fc.record({ name: entryPath, type: fc.constant('0'), content, size: fc.integer({ min: 0, max: 4096 }) }),
  )
  .map((entry) => [entry as RawEntry]);

const paxEntry: fc.Arbitrary<RawEntry[]> = fc
  .tuple(
    fc.array(fc.tuple(fc.constantFrom(...PAX_KEYS), paxValue), { minLength: 1, maxLength: 4 }),
    fc.constantFrom('x', 'g'),
    plainEntry,
  )
  .map(([records, type, entries]) => [{ name: 'PaxHeader', type, content: paxRecords(records) }, ...entries]);

const gnuLongName: fc.Arbitrary<RawEntry[]> = fc
  .tuple(fc.constantFrom('L', 'K'), entryPath, plainEntry)
  .map(([type, long, entries]) => [
    { name: '././@LongLink', type, content: Buffer.from(`${long}\0`) },
    ...entries,
  ]);

interface Archive {
  entries: RawEntry[][];
  end: boolean;
  /** Cut the bytes here (a fraction of the length), or keep them all. */
  truncateAt: number | null;
  /** Byte offsets (fractions) to flip. */
  flips: number[];
  target: string;
}

const archive: fc.Arbitrary<Archive> = fc.record({
  entries: fc.array(fc.oneof({ weight: 4, arbitrary: plainEntry }, paxEntry, gnuLongName), {
    minLength: 1,
    maxLength: 6,
  }),
  end: fc.oneof({ weight: 4, arbitrary: fc.constant(true) }, fc.constant(false)),
  truncateAt: fc.oneof(
    { weight: 5, arbitrary: fc.constant(null) },
    fc.double({ min: 0, max: 1, noNaN: true }),
  ),
  flips: fc.oneof(
    { weight: 5, arbitrary: fc.constant<number[]>([]) },
    fc.array(fc.double({ min: 0, max: 1, noNaN: true }), { maxLength: 3 }),
  ),
  target: fc.oneof(
    { weight: 5, arbitrary: fc.constant(TARGET) },
    fc.constantFrom(`${TARGET}/sub`, `${TARGET}/planted`, `${TARGET}/planted-rel/x`, `${TARGET}/l`),
  ),
});

/** Cases found on the way, run first every time (regression tests against the real engine). */
const FOUND: Archive[] = [
  // A PAX `path` record was re-packed after the checked name; the engine took it: /pax-escape.txt.
  {
    entries: [
      [
        { name: 'PaxHeader', type: 'x', content: paxRecords([['path', 'pax-escape.txt']]) },
        { name: 'a.txt', type: '0', content: Buffer.from('A') },
      ],
    ],
    end: true,
    truncateAt: null,
    flips: [],
    target: TARGET,
  },
  // The same through a global PAX header, for every later entry.
  {
    entries: [
      [
        { name: 'PaxHeader', type: 'g', content: paxRecords([['path', 'etc/pax-global']]) },
        { name: 'b.txt', type: '0', content: Buffer.from('B') },
      ],
    ],
    end: true,
    truncateAt: null,
    flips: [],
    target: TARGET,
  },
  // A name over NAME_MAX passed the check; the engine failed half way with a bare 500.
  {
    entries: [
      [
        { name: 'PaxHeader', type: 'x', content: paxRecords([['path', `a/${'n'.repeat(256)}`]]) },
        { name: 'long', type: '0', content: Buffer.from('L') },
      ],
    ],
    end: true,
    truncateAt: null,
    flips: [],
    target: TARGET,
  },
  // A contiguous file (type 7) passed the check and the engine refused it with a 502.
  {
    entries: [[{ name: 'c.bin', type: '7', content: Buffer.from('C') }]],
    end: true,
    truncateAt: null,
    flips: [],
    target: TARGET,
  },
  // An entry of unknown type 'Z' named "l/" passed as a file, then "l/a b/sub/sub" went under it:
  // the engine failed half way (502).
  {
    entries: [
      [
        { name: 'l/', type: 'Z', content: Buffer.from('0123456789') },
        { name: 'l/a b/sub/sub', type: '0', content: Buffer.from('S') },
      ],
    ],
    end: true,
    truncateAt: null,
    flips: [],
    target: TARGET,
  },
  // Found while looking at that one: a link the archive makes to the sandbox's planted link,
  // and an entry under it, wrote /work/outside/x-evil; the same through a link to ".".
  {
    entries: [
      [
        { name: 'x', type: '2', linkname: 'planted' },
        { name: 'x/x-evil', type: '0', content: Buffer.from('E') },
      ],
    ],
    end: true,
    truncateAt: null,
    flips: [],
    target: TARGET,
  },
  {
    entries: [
      [
        { name: 'y', type: '2', linkname: '.' },
        { name: 'y/planted/y-evil', type: '0', content: Buffer.from('E') },
      ],
    ],
    end: true,
    truncateAt: null,
    flips: [],
    target: TARGET,
  },
];

function archiveBytes(spec: Archive): Buffer {
  let bytes = tarBytes(spec.entries.flat(), spec.end);
  for (const flip of spec.flips) {
    const offset = Math.min(bytes.length - 1, Math.floor(flip * bytes.length));
    bytes[offset] = bytes[offset]! ^ 0xff;
  }
  if (spec.truncateAt !== null) bytes = bytes.subarray(0, Math.floor(spec.truncateAt * bytes.length));
  return bytes;
}

// ---- the sandbox and the checks ----

let daemon: TestDaemon;
let sandboxId = '';
let spoolDirectory = '';
const previousTmpdir = process.env.TMPDIR;
/** Paths the engine reported changed before the fuzzing began. */
let baseline = new Set<string>();
const outcomes = new Map<string, number>();

function inject(options: InjectOptions) {
  return daemon.app.inject({ ...options, headers: { ...daemon.auth, ...options.headers } });
}

async function sh(command: string): Promise<string> {
  const response = await inject({
    method: 'POST',
    url: `/v1/sandboxes/${sandboxId}/exec`,
    payload: { command },
  });
  expect(response.statusCode, response.body).toBe(200);
  const result = response.json();
  expect(result.exitCode, `${command}: ${result.stderr}`).toBe(0);
  return result.stdout;
}

async function changedPaths(): Promise<Set<string>> {
  const container = docker.getContainer(
    (await docker.listContainers({ all: true, filters: { label: [`gym.sandbox-id=${sandboxId}`] } }))[0]!.Id,
  );
  const changes = ((await container.changes()) ?? []) as Array<{ Path: string }>;
  return new Set(changes.map((change) => change.Path));
}

/**
 * Nothing changed outside the target since the baseline: the engine's own list of the sandbox's
 * changed paths (a file written through a planted link shows as /work/outside/...).
 */
async function checkNothingOutside(where: string): Promise<void> {
  const escaped = [...(await changedPaths())].filter(
    (path) =>
      !baseline.has(path) && !DAEMON_PATHS.has(path) && path !== TARGET && !path.startsWith(`${TARGET}/`),
  );
  expect(escaped, `written outside ${TARGET}: ${where}`).toEqual([]);
}

function record(status: number, code: string): void {
  const key = `${status} ${code}`.trim();
  outcomes.set(key, (outcomes.get(key) ?? 0) + 1);
}

function checkAnswer(status: number, body: string, where: string): void {
  if (status === 204) {
    record(status, '');
    return;
  }
  const code = JSON.parse(body).error?.code as string;
  record(status, code);
  if (status >= 500) console.log(`[fuzz] ${status} ${body.slice(0, 300)}: ${where.slice(0, 300)}`);
  expect(status >= 400 && status < 500 ? true : DOCUMENTED_5XX.has(code), `${status} ${body}: ${where}`).toBe(
    true,
  );
}

describe.skipIf(skipReason !== undefined)('upload fuzzing against a real sandbox', () => {
  beforeAll(async () => {
    // Spooled uploads go to a directory of this test's own, so a leftover is this test's to see.
    daemon = await startTestDaemon({ namespace: `fuzz-${randomBytes(4).toString('hex')}` });
    spoolDirectory = await mkdtemp(join(tmpdir(), 'gym-fuzz-spool-'));
    process.env.TMPDIR = spoolDirectory;
    const created = await inject({
      method: 'POST',
      url: '/v1/sandboxes',
      payload: { image: busybox, labels: { suite: 'archive-fuzz' } },
    });
    expect(created.statusCode, created.body).toBe(201);
    sandboxId = created.json().id;
    await sh(
      `mkdir -p ${TARGET}/sub ${OUTSIDE} && ln -s ${OUTSIDE} ${TARGET}/planted && ln -s ../outside ${TARGET}/planted-rel && echo seen > /tmp/seen`,
    );
    baseline = await changedPaths();
  });

  afterAll(async () => {
    if (previousTmpdir === undefined) delete process.env.TMPDIR;
    else process.env.TMPDIR = previousTmpdir;
    // The last test removes the sandbox; after a failure on the way, this does.
    if (sandboxId !== '') await inject({ method: 'DELETE', url: `/v1/sandboxes/${sandboxId}` });
    await daemon?.cleanup();
    if (spoolDirectory !== '') await rm(spoolDirectory, { recursive: true, force: true });
  });

  it('hostile archives write nothing outside the target', { timeout: fuzzTimeout(60_000) }, async () => {
    await fc.assert(
      fc.asyncProperty(archive, async (spec) => {
        const bytes = archiveBytes(spec);
        const url = `/v1/sandboxes/${sandboxId}/archive?path=${encodeURIComponent(spec.target)}`;
        const response = await inject({
          method: 'PUT',
          url,
          headers: { 'content-type': 'application/x-tar' },
          payload: bytes,
        });
        const where = `${spec.target} <- ${bytes.length} bytes: ${JSON.stringify(spec.entries.flat().map((entry) => [entry.type, entry.name.slice(0, 60), entry.linkname?.slice(0, 60)]))}`;
        checkAnswer(response.statusCode, response.body, where);
        await checkNothingOutside(where);
      }),
      {
        ...fuzzParameters<[Archive]>('archive upload', 24, 1),
        examples: FOUND.map((found): [Archive] => [found]),
      },
    );
  });

  it('file uploads under the target write nothing outside it', { timeout: fuzzTimeout(60_000) }, async () => {
    await fc.assert(
      fc.asyncProperty(relativePath, content, async (path, bytes) => {
        const target = posix.join(TARGET, path.replace(/(^|\/)\.\.(?=\/|$)/g, '$1dots'));
        const response = await inject({
          method: 'PUT',
          url: `/v1/sandboxes/${sandboxId}/files?path=${encodeURIComponent(target)}`,
          headers: { 'content-type': 'application/octet-stream' },
          payload: bytes,
        });
        checkAnswer(response.statusCode, response.body, target);
        await checkNothingOutside(target);
      }),
      {
        ...fuzzParameters<[string, Buffer]>('file upload', 8, 2),
        // Found: a file under a file was the engine's bare 500 (a 502), not PATH_KIND_MISMATCH.
        examples: [
          ['found-file', Buffer.from('F')],
          ['found-file/below/x', Buffer.from('X')],
          // A name over NAME_MAX: the engine's bare 500 again.
          [`${'n'.repeat(256)}/x`, Buffer.from('N')],
        ],
      },
    );
  });

  it('leaves the daemon answering, the sandbox usable and no spooled upload behind', async () => {
    console.log(`[fuzz] upload outcomes: ${JSON.stringify(Object.fromEntries([...outcomes].sort()))}`);
    // Both kinds of answer were reached: some archives were written, some refused (a budget
    // that the fixed examples fill alone, GYM_FUZZ_RUNS=4 say, proves nothing either way).
    const total = [...outcomes.values()].reduce((sum, count) => sum + count, 0);
    if (total >= 20) {
      expect([...outcomes.keys()].some((key) => key.startsWith('204'))).toBe(true);
      expect([...outcomes.keys()].some((key) => key.endsWith('ARCHIVE_UNSAFE'))).toBe(true);
    }
    const health = await daemon.app.inject({ method: 'GET', url: '/healthz' });
    expect(health.json()).toEqual({ ok: true });
    expect(await sh('cat /tmp/seen')).toBe('seen\n');
    expect(await sh(`ls -A ${OUTSIDE}`)).toBe('');
    expect(await readdir(spoolDirectory)).toEqual([]);
  });

  it('removes its sandbox and leaves no container', async () => {
    const removed = await inject({ method: 'DELETE', url: `/v1/sandboxes/${sandboxId}` });
    expect(removed.statusCode, removed.body).toBe(204);
    const left = await docker.listContainers({
      all: true,
      filters: { label: [`gym.sandbox-id=${sandboxId}`] },
    });
    expect(left).toEqual([]);
  });
});
