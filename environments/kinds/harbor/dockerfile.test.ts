import { describe, expect, it } from 'vitest';
import { isGymError } from '../../../core/errors.ts';
import { parseDockerfile, planDockerfile, processWords } from './dockerfile.ts';

const plan = (text: string, buildArgs: Record<string, string> = {}) =>
  planDockerfile(parseDockerfile(text), buildArgs);

function refusal(text: string): string {
  try {
    plan(text);
  } catch (error) {
    if (isGymError(error, 'VALIDATION_FAILED')) return error.message;
    throw error;
  }
  throw new Error('the Dockerfile was accepted');
}

describe('parseDockerfile', () => {
  it('joins continuations, drops comments (inside continuations too) and reads parser directives', () => {
    const instructions = parseDockerfile(
      '# syntax=docker/dockerfile:1\n\nFROM gym/debian-base:latest\n# a comment\nRUN apt-get update && \\\n  # inside\n  echo one \\\n  two\nworkdir /app\n',
    );
    expect(instructions).toEqual([
      { keyword: 'FROM', text: 'gym/debian-base:latest', line: 3 },
      { keyword: 'RUN', text: 'apt-get update &&   echo one   two', line: 5 },
      { keyword: 'WORKDIR', text: '/app', line: 9 },
    ]);
  });

  it('refuses another escape character and a dangling continuation', () => {
    expect(() => parseDockerfile('# escape=`\nFROM x\n')).toThrow(/escape character/);
    expect(() => parseDockerfile('FROM x\nRUN echo \\\n')).toThrow(/line 2: .*continuation/);
  });
});

describe('processWords', () => {
  it('expands variables except in single quotes and honours defaults and escapes', () => {
    const variables = { HOME: '/root', EMPTY: '' };
    expect(
      processWords('$HOME "${HOME}/x y" \'$HOME\' ${EMPTY:-dflt} ${HOME:+set} \\$HOME', variables, 1),
    ).toEqual(['/root', '/root/x y', '$HOME', 'dflt', 'set', '$HOME']);
    expect(() => processWords('${HOME:?no}', variables, 4)).toThrow(/line 4: unsupported variable/);
  });
});

describe('planDockerfile', () => {
  it('plans RUN, COPY, WORKDIR, ENV, ARG and USER in order, with the image settings at the end', () => {
    const result = plan(
      [
        'ARG BASE=gym/debian-base:latest',
        'FROM ${BASE} AS build',
        'ARG VERSION=1.0',
        'ENV APP_HOME=/app LANG="C.UTF-8"',
        'ENV LEGACY some value',
        'WORKDIR $APP_HOME',
        'COPY --chown=1000:1000 --chmod=755 run.sh ./bin/',
        'COPY data.txt notes.md /srv/',
        'ADD config.json conf.json',
        'RUN echo $VERSION > version.txt',
        'USER 1000',
        'RUN ["python3", "-c", "print(1)"]',
        'EXPOSE 8080',
        'CMD ["bash"]',
      ].join('\n'),
    );
    expect(result.base).toBe('gym/debian-base:latest');
    expect(result.steps).toEqual([
      { kind: 'workdir', path: '/app', line: 6 },
      {
        kind: 'copy',
        sources: ['run.sh'],
        destination: '/app/bin/',
        chown: '1000:1000',
        chmod: '755',
        line: 7,
      },
      { kind: 'copy', sources: ['data.txt', 'notes.md'], destination: '/srv/', line: 8 },
      { kind: 'copy', sources: ['config.json'], destination: '/app/conf.json', line: 9 },
      {
        kind: 'run',
        argv: ['/bin/sh', '-c', 'echo $VERSION > version.txt'],
        workdir: '/app',
        env: { VERSION: '1.0', APP_HOME: '/app', LANG: 'C.UTF-8', LEGACY: 'some value' },
        line: 10,
      },
      {
        kind: 'run',
        argv: ['python3', '-c', 'print(1)'],
        workdir: '/app',
        env: { VERSION: '1.0', APP_HOME: '/app', LANG: 'C.UTF-8', LEGACY: 'some value' },
        user: '1000',
        line: 12,
      },
    ]);
    // ARG values reach RUN but not the image; ENV does.
    expect(result.settings).toEqual({
      env: { APP_HOME: '/app', LANG: 'C.UTF-8', LEGACY: 'some value' },
      workdir: '/app',
      user: '1000',
      cmd: ['bash'],
      labels: {},
    });
    expect(result.ignored).toEqual([{ keyword: 'EXPOSE', line: 13 }]);
  });

  it('takes build arguments over ARG defaults, and SHELL for the shell form', () => {
    const result = plan(
      'ARG TAG=latest\nFROM gym/busybox:$TAG\nSHELL ["/bin/bash", "-eu", "-c"]\nRUN echo hi\n',
      {
        TAG: 'd51c2850e834',
      },
    );
    expect(result.base).toBe('gym/busybox:d51c2850e834');
    expect(result.steps[0]).toMatchObject({ argv: ['/bin/bash', '-eu', '-c', 'echo hi'], workdir: '/' });
  });

  it('resolves relative WORKDIRs against the previous one', () => {
    const result = plan('FROM x\nWORKDIR /srv\nWORKDIR app\nWORKDIR ../data\n');
    expect(result.settings.workdir).toBe('/srv/data');
  });

  it('refuses what needs a registry, the network or BuildKit, naming the line', () => {
    expect(refusal('FROM a\nFROM b\n')).toMatch(/line 2: several FROM/);
    expect(refusal('FROM a\nCOPY --from=build /x /y\n')).toMatch(/line 2: COPY --from/);
    expect(refusal('FROM a\nRUN --mount=type=cache,target=/root/.cache pip install x\n')).toMatch(
      /line 2: RUN --mount needs BuildKit/,
    );
    expect(refusal('FROM a\nADD https://example.invalid/x.tar.gz /opt/\n')).toMatch(
      /line 2: .*remote source/,
    );
    expect(refusal('FROM a\nADD tools.tar.gz /opt/\n')).toMatch(/line 2: ADD would unpack/);
    expect(refusal('FROM a\nCOPY ../secret /x\n')).toMatch(/line 2: .*outside the build context/);
    expect(refusal('FROM a\nCOPY *.py /x/\n')).toMatch(/line 2: wildcards/);
    expect(refusal('FROM a\nRUN <<EOF\necho\nEOF\n')).toMatch(/line 2: heredocs/);
    expect(refusal('RUN echo\nFROM a\n')).toMatch(/line 1: RUN before FROM/);
    expect(refusal('FROM --platform=linux/arm64 a\n')).toMatch(/line 1: FROM --platform/);
    expect(refusal('FROM a\nFROBNICATE x\n')).toMatch(/line 2: unknown instruction FROBNICATE/);
    expect(refusal('# nothing\n')).toMatch(/no FROM/);
  });
});
