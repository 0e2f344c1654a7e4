import { describe, expect, it } from 'vitest';
import { type PathKind, planReads, type SandboxListing } from './archive-snapshot-listing.ts';

function listing(kinds: Record<string, PathKind>, changed: string[], moved: string[] = []): SandboxListing {
  return {
    mode: 'ctime',
    kinds: new Map(Object.entries(kinds)),
    changed: new Set(changed),
    moved: new Set(moved),
    readOnlyMounts: [],
  };
}

describe('planReads', () => {
  it('reads a new tree whole and a changed file through its folder; an overlay-copied folder is not read whole', () => {
    // /usr was copied up by the overlay (ctime new, mtime old) to remove /usr/share/doc (which
    // gave /usr/share a new mtime too).
    const plan = planReads(
      listing(
        {
          '/usr': 'd',
          '/usr/share': 'd',
          '/usr/share/man': 'd',
          '/usr/bin': 'd',
          '/usr/bin/ls': 'f',
          '/etc': 'd',
          '/etc/passwd': 'f',
          '/etc/group': 'f',
          '/opt': 'd',
          '/opt/a': 'd',
          '/opt/a/f': 'f',
        },
        ['/usr', '/usr/share', '/etc', '/etc/passwd', '/opt', '/opt/a', '/opt/a/f'],
        ['/usr'],
      ),
    );
    expect(Object.fromEntries(plan.reads)).toEqual({ '/opt': 'whole', '/etc': 'filtered' });
    expect(plan.bareDirectories.sort()).toEqual(['/etc', '/usr', '/usr/share']);
  });

  it('reads a renamed folder whole: its entries keep their old ctime', () => {
    const plan = planReads(
      listing(
        { '/srv': 'd', '/srv/moved': 'd', '/srv/moved/old': 'f' },
        ['/srv', '/srv/moved'],
        ['/srv/moved'],
      ),
    );
    expect(Object.fromEntries(plan.reads)).toEqual({ '/srv/moved': 'whole' });
  });

  it('merges the deepest reads into their folders past the read limit', () => {
    const kinds: Record<string, PathKind> = { '/etc': 'd', '/etc/a': 'd', '/etc/b': 'd' };
    const changed: string[] = [];
    for (const folder of ['/etc/a', '/etc/b'])
      for (let index = 0; index < 5; index += 1) {
        kinds[`${folder}/d${index}`] = 'd';
        kinds[`${folder}/d${index}/old`] = 'f';
        kinds[`${folder}/d${index}/new`] = 'f';
        changed.push(`${folder}/d${index}/new`);
      }
    const plan = planReads(listing(kinds, changed), 4);
    expect(plan.reads.size).toBeLessThanOrEqual(4);
    for (const path of changed)
      expect([...plan.reads.keys()].some((root) => path.startsWith(`${root}/`))).toBe(true);
  });
});
