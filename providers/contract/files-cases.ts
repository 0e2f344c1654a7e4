import { randomBytes } from 'node:crypto';
import { Readable } from 'node:stream';
import { expect, it } from 'vitest';
import { expectGymError, type SandboxFixture } from './fixture.ts';
import { type ContractEntry, entriesToTar, tarToEntries } from './tar-helpers.ts';

async function readAll(stream: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

export function defineFileCases(fixture: SandboxFixture, sandboxId: () => string): void {
  it('round-trips a binary file, creating parent directories', async () => {
    const bytes = randomBytes(300_000);
    await fixture.provider.writeFile(sandboxId(), '/tmp/new/nested/blob.bin', bytes, { mode: 0o750 });
    const back = await readAll(await fixture.provider.readFile(sandboxId(), '/tmp/new/nested/blob.bin'));
    expect(back.equals(bytes)).toBe(true);
    const mode = await fixture.exec(sandboxId(), {
      argv: ['stat', '-c', '%a %s', '/tmp/new/nested/blob.bin'],
    });
    expect(mode.stdout.trim()).toBe('750 300000');
  });

  it('streams a file given as a stream with its size', async () => {
    const bytes = randomBytes(1_000_000);
    await fixture.provider.writeFile(sandboxId(), '/tmp/streamed.bin', {
      stream: Readable.from([bytes.subarray(0, 1000), bytes.subarray(1000)]),
      sizeBytes: bytes.length,
    });
    const back = await readAll(await fixture.provider.readFile(sandboxId(), '/tmp/streamed.bin'));
    expect(back.equals(bytes)).toBe(true);
  });

  it('replaces an existing file and reads through a symlink', async () => {
    await fixture.provider.writeFile(sandboxId(), '/tmp/replace.txt', Buffer.from('first version, longer'));
    await fixture.provider.writeFile(sandboxId(), '/tmp/replace.txt', Buffer.from('second'));
    await fixture.exec(sandboxId(), { argv: ['ln', '-sf', '/tmp/replace.txt', '/tmp/replace-link'] });
    const back = await readAll(await fixture.provider.readFile(sandboxId(), '/tmp/replace-link'));
    expect(back.toString()).toBe('second');
  });

  it('reports a missing file and a directory read as a file', async () => {
    await expectGymError(fixture.provider.readFile(sandboxId(), '/no/such/file'), 'FILE_NOT_FOUND');
    await expectGymError(fixture.provider.readFile(sandboxId(), '/tmp'), 'PATH_KIND_MISMATCH');
  });

  it('round-trips a directory tree as tar', async () => {
    const binary = randomBytes(50_000);
    const entries: ContractEntry[] = [
      { name: 'README.md', type: 'file', content: Buffer.from('# tree\n') },
      { name: 'src', type: 'directory' },
      { name: 'src/pkg', type: 'directory' },
      { name: 'src/pkg/module.py', type: 'file', content: Buffer.from('print("hi")\n'), mode: 0o755 },
      { name: 'data/blob.bin', type: 'file', content: binary },
      { name: 'empty', type: 'directory' },
      { name: 'src/link-to-module', type: 'symlink', linkname: 'pkg/module.py' },
    ];
    await fixture.provider.writeArchive(sandboxId(), '/work/tree', entriesToTar(entries));
    const listed = await fixture.exec(sandboxId(), {
      command: 'cd /work/tree && find . | sort && cat src/link-to-module && stat -c %a src/pkg/module.py',
    });
    expect(listed.stdout).toBe(
      [
        '.',
        './README.md',
        './data',
        './data/blob.bin',
        './empty',
        './src',
        './src/link-to-module',
        './src/pkg',
        './src/pkg/module.py',
        'print("hi")',
        '755',
        '',
      ].join('\n'),
    );
    const back = await tarToEntries(await fixture.provider.readArchive(sandboxId(), '/work/tree'));
    const byName = new Map(back.map((entry) => [entry.name.replace(/\/$/, ''), entry]));
    expect(byName.get('README.md')?.content?.toString()).toBe('# tree\n');
    expect(byName.get('data/blob.bin')?.content?.equals(binary)).toBe(true);
    expect(byName.get('src/link-to-module')).toMatchObject({ type: 'symlink', linkname: 'pkg/module.py' });
    expect(byName.get('empty')?.type).toBe('directory');
    // What came out goes back in elsewhere unchanged.
    await fixture.provider.writeArchive(
      sandboxId(),
      '/work/copy',
      await fixture.provider.readArchive(sandboxId(), '/work/tree'),
    );
    const same = await fixture.exec(sandboxId(), {
      command: 'cd /work && sha256sum tree/data/blob.bin copy/data/blob.bin | cut -d" " -f1 | uniq | wc -l',
    });
    expect(same.stdout.trim()).toBe('1');
  });

  const unsafeArchives: Array<[string, ContractEntry[]]> = [
    ['a "../" entry', [{ name: 'escape/../../evil.txt', type: 'file', content: Buffer.from('x') }]],
    ['an absolute name', [{ name: '/tmp/evil-absolute.txt', type: 'file', content: Buffer.from('x') }]],
    ['a symlink pointing outside', [{ name: 'out', type: 'symlink', linkname: '../../../etc' }]],
    ['an absolute symlink', [{ name: 'abs', type: 'symlink', linkname: '/etc/passwd' }]],
    [
      'a symlink chain that escapes',
      [
        { name: 'hop', type: 'symlink', linkname: 'up/..' },
        { name: 'up', type: 'symlink', linkname: '..' },
      ],
    ],
    ['a hard link to a file outside', [{ name: 'hard', type: 'link', linkname: '../../etc/passwd' }]],
    ['a device node', [{ name: 'dev', type: 'character-device' }]],
  ];
  for (const [what, badEntries] of unsafeArchives) {
    it(`refuses an archive with ${what} and writes nothing`, async () => {
      const target = `/work/unsafe-${Math.random().toString(36).slice(2, 8)}`;
      const entries: ContractEntry[] = [
        { name: 'good-first.txt', type: 'file', content: Buffer.from('fine') },
        ...badEntries,
      ];
      const error = await expectGymError(
        fixture.provider.writeArchive(sandboxId(), target, entriesToTar(entries)),
        'ARCHIVE_UNSAFE',
      );
      expect(error.message).toMatch(/nothing was written/);
      const check = await fixture.exec(sandboxId(), {
        command: `ls ${target} 2>&1; ls /tmp/evil-absolute.txt /evil.txt 2>&1; true`,
      });
      expect(check.stdout).not.toContain('good-first.txt');
      expect(check.stdout).toMatch(/No such file/);
      expect(check.stdout).not.toMatch(/^\/tmp\/evil-absolute\.txt$/m);
    });
  }

  it('refuses a file upload through a symlink planted in the sandbox, writing nothing', async () => {
    // Seen: `ln -s /etc /data/evil`, then an upload to /data/evil/x wrote /etc/x.
    const base = `/data-${Math.random().toString(36).slice(2, 8)}`;
    await fixture.exec(sandboxId(), { command: `mkdir -p ${base} && ln -s /etc ${base}/evil` });
    const error = await expectGymError(
      fixture.provider.writeFile(sandboxId(), `${base}/evil/planted-file`, Buffer.from('owned')),
      'PATH_KIND_MISMATCH',
    );
    expect(error.message).toContain(`${base}/evil`);
    await expectGymError(
      fixture.provider.writeFile(sandboxId(), `${base}/evil/deeper/planted-file`, Buffer.from('owned')),
      'PATH_KIND_MISMATCH',
    );
    const check = await fixture.exec(sandboxId(), { command: 'ls /etc/planted-file /etc/deeper 2>&1; true' });
    expect(check.stdout).not.toMatch(/^\/etc\/planted-file$/m);
    expect(check.stdout).toMatch(/No such file/);
  });

  it('refuses an archive upload into or through a symlink planted in the sandbox, writing nothing', async () => {
    const base = `/data-${Math.random().toString(36).slice(2, 8)}`;
    await fixture.exec(sandboxId(), { command: `mkdir -p ${base}/real && ln -s /etc ${base}/evil` });
    const entries: ContractEntry[] = [
      { name: 'planted-archive.txt', type: 'file', content: Buffer.from('x') },
    ];
    await expectGymError(
      fixture.provider.writeArchive(sandboxId(), `${base}/evil`, entriesToTar(entries)),
      'PATH_KIND_MISMATCH',
    );
    const through: ContractEntry[] = [
      { name: 'real/fine.txt', type: 'file', content: Buffer.from('fine') },
      { name: 'evil/planted-archive.txt', type: 'file', content: Buffer.from('x') },
    ];
    await expectGymError(
      fixture.provider.writeArchive(sandboxId(), base, entriesToTar(through)),
      'PATH_KIND_MISMATCH',
    );
    const check = await fixture.exec(sandboxId(), {
      command: `ls /etc/planted-archive.txt ${base}/real/fine.txt 2>&1; true`,
    });
    expect(check.stdout).not.toMatch(/^\/etc\/planted-archive\.txt$/m);
    expect(check.stdout).not.toMatch(/^.*real\/fine\.txt$/m);
    // An upload next to the link, not through it, still works.
    await fixture.provider.writeArchive(sandboxId(), `${base}/real`, entriesToTar(entries));
    await fixture.provider.writeFile(sandboxId(), `${base}/real/sub/file.txt`, Buffer.from('ok'));
  });

  it('refuses an archive that goes through a link of its own to a link planted in the sandbox', async () => {
    // Seen on Docker: `x -> evil` (the sandbox's link to /etc) and then `x/owned` wrote /etc/owned;
    // the sandbox check saw no `x` yet. Likewise `y -> .` and then `y/evil/owned`.
    const base = `/data-${Math.random().toString(36).slice(2, 8)}`;
    await fixture.exec(sandboxId(), { command: `mkdir -p ${base} && ln -s /etc ${base}/evil` });
    for (const entries of [
      [
        { name: 'x', type: 'symlink', linkname: 'evil' },
        { name: 'x/owned-through-link', type: 'file', content: Buffer.from('x') },
      ],
      [
        { name: 'y', type: 'symlink', linkname: '.' },
        { name: 'y/evil/owned-through-link', type: 'file', content: Buffer.from('x') },
      ],
    ] satisfies ContractEntry[][]) {
      await expectGymError(
        fixture.provider.writeArchive(sandboxId(), base, entriesToTar(entries)),
        'ARCHIVE_UNSAFE',
      );
    }
    const check = await fixture.exec(sandboxId(), {
      command: `ls /etc/owned-through-link ${base}/x ${base}/y 2>&1; true`,
    });
    expect(check.stdout).not.toMatch(/^\/etc\/owned-through-link$/m);
    expect(check.stdout.match(/No such file/g)).toHaveLength(3);
  });

  it('refuses an upload that is not a tar archive', async () => {
    await expectGymError(
      fixture.provider.writeArchive(
        sandboxId(),
        '/work/garbage',
        Readable.from([Buffer.from('this is not a tar archive at all'.repeat(40))]),
      ),
      'VALIDATION_FAILED',
      'ARCHIVE_UNSAFE',
    );
  });
}
