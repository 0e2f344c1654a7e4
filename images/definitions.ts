/**
 * The images the project builds itself, since no registry is reachable on our machines. Each is
 * tagged with a hash of its recipe (and of the inputs the recipe copies), so it is rebuilt only
 * when the recipe changes.
 */

export interface BusyboxImageDefinition {
  kind: 'busybox';
  name: string;
  description: string;
  /** Where the statically linked busybox comes from (Debian's `busybox-static`). */
  busyboxPath: string;
}

export interface DebootstrapImageDefinition {
  kind: 'debootstrap';
  name: string;
  description: string;
  suite: string;
  variant: 'minbase' | 'buildd';
  /** Packages added on top of the variant (debootstrap `--include`). */
  include: string[];
  /** Dockerfile instructions applied at import (`ENV`, `CMD`, `WORKDIR`). */
  changes: string[];
}

export type ImageDefinition = BusyboxImageDefinition | DebootstrapImageDefinition;

/** Bump when the builder itself changes in a way that alters the images it produces. */
export const BUILDER_VERSION = 1;

/** The repository part of every image we build; `gym image ls` lists exactly these. */
export const IMAGE_REPOSITORY_PREFIX = 'gym/';

export const IMAGE_DEFINITIONS: readonly ImageDefinition[] = [
  {
    kind: 'busybox',
    name: 'busybox',
    description: 'A few MiB: static busybox with a root user; for fast tests of providers and the API.',
    busyboxPath: '/bin/busybox',
  },
  {
    kind: 'debootstrap',
    name: 'debian-base',
    description: 'Debian bookworm minbase with python3, git and pytest; the base of SWE-style task images.',
    suite: 'bookworm',
    variant: 'minbase',
    include: ['python3', 'python3-pytest', 'git', 'ca-certificates', 'procps', 'patch'],
    changes: [
      'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
      'ENV LANG=C.UTF-8',
      'CMD ["/bin/bash"]',
    ],
  },
];

export function findImageDefinition(name: string): ImageDefinition | undefined {
  return IMAGE_DEFINITIONS.find((definition) => definition.name === name);
}
