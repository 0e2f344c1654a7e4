import { Readable } from 'node:stream';
import * as tar from 'tar-stream';
import { describe, expect, it } from 'vitest';
import { GymError } from '../../core/errors.ts';
import { type ContractEntry, entriesToTar, tarToEntries } from '../contract/tar-helpers.ts';
import { packSingleFile, rebaseArchive, spoolSafeArchive } from './archive.ts';

async function spoolNames(
  entries: ContractEntry[],
  target = '/work/dst',
  input: Readable = entriesToTar(entries),
): Promise<ContractEntry[]> {
  const spooled = await spoolSafeArchive(input, target);
  try {
    return await tarToEntries(spooled.open());
  } finally {
    await spooled.dispose();
  }
}

async function refusal(entries: ContractEntry[]): Promise<GymError> {
  const error = await spoolSafeArchive(entriesToTar(entries), '/work/dst').then(
    () => null,
    (caught: unknown) => caught,
  );
  expect(error).toBeInstanceOf(GymError);
  expect((error as GymError).code).toBe('ARCHIVE_UNSAFE');
  return error as GymError;
}

const file = (name: string, text = 'x'): ContractEntry => ({
  name,
  type: 'file',
  content: Buffer.from(text),
});

describe('spoolSafeArchive', () => {
  it('re-roots entries under the target directory, keeping links inside it', async () => {
    const out = await spoolNames([
      { name: './', type: 'directory' },
      file('./a.txt', 'A'),
      { name: 'dir/', type: 'directory' },
      file('dir/b.txt', 'B'),
      { name: 'dir/link', type: 'symlink', linkname: '../a.txt' },
      { name: 'hard', type: 'link', linkname: 'dir/b.txt' },
      { name: 'self', type: 'symlink', linkname: '.' },
    ]);
    expect(out.map((entry) => [entry.name, entry.type, entry.linkname ?? ''])).toEqual([
      ['work/dst/a.txt', 'file', ''],
      ['work/dst/dir', 'directory', ''],
      ['work/dst/dir/b.txt', 'file', ''],
      ['work/dst/dir/link', 'symlink', '../a.txt'],
      ['work/dst/hard', 'link', 'work/dst/dir/b.txt'],
      ['work/dst/self', 'symlink', '.'],
    ]);
    expect(out[0]?.content?.toString()).toBe('A');
  });

  it.each<[string, ContractEntry[]]>([
    ['a parent segment', [file('a/../../x')]],
    ['an absolute name', [file('/etc/x')]],
    ['an escaping symlink', [{ name: 'l', type: 'symlink', linkname: '../x' }]],
    ['an absolute symlink', [{ name: 'l', type: 'symlink', linkname: '/etc' }]],
    [
      'a symlink escaping through another symlink',
      [
        { name: 'b', type: 'symlink', linkname: '..' },
        { name: 'a', type: 'symlink', linkname: 'b/x' },
      ],
    ],
    [
      'a symlink re-pointed by a later one',
      [
        { name: 'a', type: 'symlink', linkname: 'b/..' },
        { name: 'b', type: 'symlink', linkname: '..' },
      ],
    ],
    [
      'a symlink loop',
      [
        { name: 'a', type: 'symlink', linkname: 'b/x' },
        { name: 'b', type: 'symlink', linkname: 'a/y' },
      ],
    ],
    ['a hard link to a file not in the archive', [{ name: 'h', type: 'link', linkname: 'elsewhere' }]],
    ['a fifo or device', [{ name: 'd', type: 'character-device' }]],
    // Seen writing outside the target: the sandbox holds `planted -> /work/outside`; the archive's
    // own link leads to it (or to `.`, then through it), and the engine writes through both.
    [
      'an entry under a symlink of the archive',
      [{ name: 'x', type: 'symlink', linkname: 'planted' }, file('x/evil')],
    ],
    [
      'an entry under a symlink of the archive to "."',
      [{ name: 'y', type: 'symlink', linkname: '.' }, file('y/planted/evil')],
    ],
    [
      'a symlink over a name the archive already put entries under',
      [file('x/first'), { name: 'x', type: 'symlink', linkname: 'planted' }],
    ],
    ['an entry under a file of the archive', [file('l'), file('l/a b/sub')]],
    [
      'a hard link over a directory of the archive',
      [file('h/a'), { name: 'h', type: 'link', linkname: 'fine.txt' }],
    ],
  ])('refuses %s', async (_what, bad) => {
    const error = await refusal([file('fine.txt'), ...bad]);
    expect(error.message).toContain('nothing was written');
  });

  it('takes absolute and climbing links at the root, where the sandbox resolves them within itself', async () => {
    // A root filesystem holds them (`/etc/localtime -> /usr/share/zoneinfo/UTC`); written at
    // `/`, `/x` and `/..` resolve inside the sandbox's own root.
    const out = await spoolNames(
      [
        { name: 'etc/localtime', type: 'symlink', linkname: '/usr/share/zoneinfo/UTC' },
        { name: 'up', type: 'symlink', linkname: '../../..' },
        file('usr/x'),
      ],
      '/',
    );
    expect(out.map((entry) => [entry.name, entry.linkname ?? ''])).toEqual([
      ['etc/localtime', '/usr/share/zoneinfo/UTC'],
      ['up', '../../..'],
      ['usr/x', ''],
    ]);
  });

  it("keeps the strict rule at the root for a tar unpacked elsewhere (an image plan's files)", async () => {
    const error = await spoolSafeArchive(
      entriesToTar([{ name: 'l', type: 'symlink', linkname: '/etc' }]),
      '/',
      { extractedAtTarget: false },
    ).then(
      () => null,
      (caught: unknown) => caught,
    );
    expect((error as GymError).code).toBe('ARCHIVE_UNSAFE');
  });

  it.each<[string, ContractEntry[]]>([
    [
      'an entry under an absolute link of the archive',
      [{ name: 'l', type: 'symlink', linkname: '/' }, file('l/etc/x')],
    ],
    [
      'an entry under a climbing link of the archive',
      [{ name: 'a/l', type: 'symlink', linkname: '../..' }, file('a/l/x')],
    ],
    [
      'a symlink loop',
      [
        { name: 'a', type: 'symlink', linkname: '/b' },
        { name: 'b', type: 'symlink', linkname: '/a/x' },
      ],
    ],
  ])('at the root still refuses %s', async (_what, bad) => {
    const error = await spoolSafeArchive(entriesToTar(bad), '/').then(
      () => null,
      (caught: unknown) => caught,
    );
    expect((error as GymError).code).toBe('ARCHIVE_UNSAFE');
  });

  it('re-packs no PAX record of the upload: the engine would read it after the checked name', async () => {
    // Each record here was passed through as it came: `path` put /pax-escape.txt at the root of
    // a real sandbox (the engine's reader takes the last `path`), GNU.sparse.name renames too.
    const pack = tar.pack();
    pack.entry({ name: 'a.txt', pax: { path: 'pax-escape.txt' } }, 'A');
    pack.entry({ name: 'b.txt', pax: { 'GNU.sparse.name': 'sparse-escape.txt' } }, 'B');
    pack.entry({ name: 'c.txt', pax: { 'SCHILY.xattr.security.capability': 'x' } }, 'C');
    pack.entry({ name: `${'d'.repeat(150)}/${'e'.repeat(150)}/long.txt`, type: 'file' }, 'D');
    pack.finalize();
    const spooled = await spoolSafeArchive(Readable.from(pack as AsyncIterable<Buffer>), '/work/dst');
    try {
      const extract = tar.extract();
      spooled.open().pipe(extract as unknown as NodeJS.WritableStream);
      const seen: Array<[string, unknown]> = [];
      for await (const entry of extract) {
        entry.resume();
        seen.push([entry.header.name, entry.header.pax ?? null]);
      }
      expect(seen).toEqual([
        ['work/dst/pax-escape.txt', null],
        ['work/dst/b.txt', null],
        ['work/dst/c.txt', null],
        // A name too long for the plain header travels in a PAX record tar-stream writes itself.
        [
          `work/dst/${'d'.repeat(150)}/${'e'.repeat(150)}/long.txt`,
          { path: `work/dst/${'d'.repeat(150)}/${'e'.repeat(150)}/long.txt` },
        ],
      ]);
    } finally {
      await spooled.dispose();
    }
  });

  // Found by the upload fuzzer: the engine answered "unhandled tar header type 55", a 502.
  it('writes a contiguous file as a regular file', async () => {
    const pack = tar.pack();
    pack.entry({ name: 'c.bin', type: 'contiguous-file' }, 'C');
    pack.finalize();
    const out = await spoolNames([], '/work/dst', Readable.from(pack as AsyncIterable<Buffer>));
    expect(out.map((entry) => [entry.name, entry.type])).toEqual([['work/dst/c.bin', 'file']]);
  });

  // Found by the upload fuzzer: an entry of typeflag 'Z' went through as a file, the engine
  // then failed the upload half way (502).
  it('refuses an entry of a type tar-stream does not know', async () => {
    const bytes = Buffer.from(
      await new Response(Readable.toWeb(entriesToTar([file('odd')])) as ReadableStream).arrayBuffer(),
    );
    bytes.write('Z', 156, 'latin1');
    bytes.write('        ', 148, 'latin1');
    let sum = 0;
    for (let index = 0; index < 512; index += 1) sum += bytes[index]!;
    bytes.write(`${sum.toString(8).padStart(6, '0')}\0 `, 148, 'latin1');
    const error = await spoolSafeArchive(Readable.from([bytes]), '/work/dst').catch(
      (caught: unknown) => caught,
    );
    expect(error).toMatchObject({ code: 'ARCHIVE_UNSAFE' });
    expect((error as GymError).message).toContain('"odd" is of a type');
  });

  it('reports a stream that is not a tar as a validation error', async () => {
    const error = await spoolSafeArchive(Readable.from([Buffer.alloc(1024, 7)]), '/x').catch(
      (caught: unknown) => caught,
    );
    expect(error).toMatchObject({ code: 'VALIDATION_FAILED' });
  });
});

describe('rebaseArchive and packSingleFile', () => {
  it('strips the directory Docker puts in front of every entry', async () => {
    const out = await tarToEntries(
      rebaseArchive(
        entriesToTar([
          { name: 'tree/', type: 'directory' },
          file('tree/a.txt', 'A'),
          { name: 'tree/h', type: 'link', linkname: 'tree/a.txt' },
        ]),
      ),
    );
    expect(out.map((entry) => [entry.name, entry.linkname ?? ''])).toEqual([
      ['a.txt', ''],
      ['h', 'a.txt'],
    ]);
  });

  it('keeps long names stripped: no PAX path record of the input comes through', async () => {
    // Longer than a tar header's name field: the input carries them as PAX `path` records.
    const deep = `tree/${'d'.repeat(200)}/${'e'.repeat(200)}`;
    const out = await tarToEntries(
      rebaseArchive(
        entriesToTar([
          { name: 'tree/', type: 'directory' },
          { name: `${deep}/`, type: 'directory' },
          file(`${deep}/f.txt`, 'F'),
          { name: `${deep}/up`, type: 'symlink', linkname: `../${'x'.repeat(150)}` },
        ]),
      ),
    );
    expect(out.map((entry) => entry.name.replace(/\/$/, ''))).toEqual([
      deep.slice('tree/'.length),
      `${deep.slice('tree/'.length)}/f.txt`,
      `${deep.slice('tree/'.length)}/up`,
    ]);
    expect(out[2]?.linkname).toBe(`../${'x'.repeat(150)}`);
  });

  // A sandbox's own `tar` (a Pod's, which the agent can replace) names what it likes.
  it.each([
    ['an absolute name', [{ name: 'tree/', type: 'directory' }, file('/etc/cron.d/x')]],
    ['a name under another directory', [{ name: 'tree/', type: 'directory' }, file('other/x')]],
    ['a climbing name', [{ name: 'tree/', type: 'directory' }, file('tree/../../x')]],
    ['a climbing first directory', [{ name: '../', type: 'directory' }, file('../x')]],
    ['an absolute single file', [file('/root/.ssh/authorized_keys')]],
    [
      'an entry through a link of its own',
      [
        { name: 'tree/', type: 'directory' },
        { name: 'tree/keys', type: 'symlink', linkname: '/root/.ssh' },
        file('tree/keys/authorized_keys'),
      ],
    ],
    [
      'an entry through a link of its own to "."',
      [
        { name: 'tree/', type: 'directory' },
        { name: 'tree/here', type: 'symlink', linkname: '.' },
        file('tree/./here/x'),
      ],
    ],
    [
      'a hard link out',
      [
        { name: 'tree/', type: 'directory' },
        { name: 'tree/h', type: 'link', linkname: '/etc/passwd' },
      ],
    ],
  ] as Array<[string, ContractEntry[]]>)('ends the stream on %s', async (_case, entries) => {
    // Read as the HTTP response does: the stream itself fails, whatever it had sent before.
    const error = await rebaseArchive(entriesToTar(entries))
      .toArray()
      .then(
        () => null,
        (caught: unknown) => caught,
      );
    expect((error as GymError | null)?.code).toBe('ARCHIVE_UNSAFE');
  });

  it('passes a single-file archive through', async () => {
    const out = await tarToEntries(rebaseArchive(packSingleFile('notes.txt', Buffer.from('hello'), 0o600)));
    expect(out).toEqual([expect.objectContaining({ name: 'notes.txt', mode: 0o600 })]);
    expect(out[0]?.content?.toString()).toBe('hello');
  });
});
