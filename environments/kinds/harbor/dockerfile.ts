/**
 * A Harbor task's `environment/Dockerfile` as a build plan our registry-free builder can carry
 * out: one base image the machine already has, then RUN, COPY, WORKDIR, ENV, ARG, USER and SHELL
 * steps, and the image settings (ENV, WORKDIR, USER, CMD, ENTRYPOINT, LABEL) to commit at the end.
 * Pure: it reads text and returns data, so every rule here is tested without an engine.
 *
 * What needs a registry or BuildKit (several stages, `COPY --from`, `RUN --mount`, remote `ADD`,
 * archives unpacked by `ADD`, heredocs) is refused with the line and the reason, never guessed.
 */
import { posix } from 'node:path';
import { GymError } from '../../../core/errors.ts';

export interface DockerfileInstruction {
  /** Upper case: `RUN`, `COPY`, ... */
  keyword: string;
  /** Everything after the keyword, continuation lines joined. */
  text: string;
  /** 1-based line where the instruction starts. */
  line: number;
}

export type BuildStep =
  | {
      kind: 'run';
      /** The program and its arguments (`/bin/sh -c <command>` for the shell form). */
      argv: string[];
      workdir: string;
      /** ENV so far, and the ARG values (Docker gives RUN both). */
      env: Record<string, string>;
      user?: string;
      line: number;
    }
  | {
      kind: 'copy';
      /** Paths relative to the build context, normalized; `.` is the whole context. */
      sources: string[];
      /** Absolute; a directory when it ends with `/` or when there are several sources. */
      destination: string;
      chown?: string;
      chmod?: string;
      line: number;
    }
  | { kind: 'workdir'; path: string; user?: string; line: number };

export interface ImageSettings {
  env: Record<string, string>;
  workdir: string;
  user?: string;
  cmd?: string[];
  entrypoint?: string[];
  labels: Record<string, string>;
}

export interface DockerfilePlan {
  /** The FROM image, as written (after ARG substitution). */
  base: string;
  steps: BuildStep[];
  /** What the image says at the end (on top of the base image's own settings). */
  settings: ImageSettings;
  /** Instructions that have no effect on a sandbox (EXPOSE, HEALTHCHECK, ...), for a warning. */
  ignored: Array<{ keyword: string; line: number }>;
}

const IGNORED = new Set(['EXPOSE', 'VOLUME', 'STOPSIGNAL', 'HEALTHCHECK', 'MAINTAINER']);

function refuse(line: number, message: string): never {
  throw new GymError('VALIDATION_FAILED', `Dockerfile line ${line}: ${message}`, { details: { line } });
}

/** Splits a Dockerfile into instructions: comments dropped, `\` continuations joined. */
export function parseDockerfile(text: string): DockerfileInstruction[] {
  const lines = text.replace(/\r\n/g, '\n').split('\n');
  const instructions: DockerfileInstruction[] = [];
  let pending: { text: string; line: number } | undefined;
  let isHeader = true;
  for (const [index, raw] of lines.entries()) {
    const lineNumber = index + 1;
    const trimmed = raw.trim();
    if (isHeader) {
      const directive = /^#\s*(\w+)\s*=\s*(.*)$/.exec(trimmed);
      if (directive !== null) {
        if (directive[1]!.toLowerCase() === 'escape' && directive[2]!.trim() !== '\\')
          refuse(lineNumber, `the escape character "${directive[2]!.trim()}" is not supported (only \\)`);
        continue;
      }
      isHeader = trimmed === '';
    }
    // Comment lines and blank lines are dropped, inside a continuation too (as Docker does).
    if (trimmed === '' || trimmed.startsWith('#')) continue;
    const continues = /\\\s*$/.test(raw);
    const body = continues ? raw.replace(/\\\s*$/, '') : raw;
    if (pending === undefined) pending = { text: body.trimStart(), line: lineNumber };
    else pending.text += body;
    if (continues) continue;
    const match = /^(\S+)\s*([\s\S]*)$/.exec(pending.text.trim())!;
    instructions.push({ keyword: match[1]!.toUpperCase(), text: match[2]!.trim(), line: pending.line });
    pending = undefined;
  }
  if (pending !== undefined) refuse(pending.line, 'the last instruction ends with a line continuation');
  return instructions;
}

/**
 * Docker's word processing for ENV, LABEL, ARG, COPY, WORKDIR, USER and FROM: quotes group and
 * are removed, `\\` escapes a character (not inside single quotes), and `$NAME`, `${NAME}`,
 * `${NAME:-word}`, `${NAME:+word}` expand (not inside single quotes). With `split`, unquoted
 * whitespace separates words; without, the text is one word and its whitespace is kept.
 */
export function processWords(
  text: string,
  variables: Readonly<Record<string, string>>,
  line: number,
  split = true,
): string[] {
  const words: string[] = [];
  let current = '';
  let hasWord = false;
  let quote: '"' | "'" | undefined;
  for (let index = 0; index < text.length; index += 1) {
    const char = text[index]!;
    if (quote === "'") {
      if (char === "'") quote = undefined;
      else current += char;
      continue;
    }
    if (char === '\\' && index + 1 < text.length) {
      index += 1;
      current += text[index]!;
      hasWord = true;
    } else if (char === '$') {
      const expression = /^\$(?:\{([A-Za-z_]\w*)(?:(:[-+])([^}]*))?\}|([A-Za-z_]\w*))/.exec(
        text.slice(index),
      );
      if (expression === null) {
        if (text[index + 1] === '{') refuse(line, `unsupported variable expression in "${text}"`);
        current += char;
      } else {
        const [whole, braced, operator, word, bare] = expression;
        const value = variables[(braced ?? bare)!];
        const isSet = value !== undefined && value !== '';
        current +=
          operator === ':-'
            ? isSet
              ? value
              : (word ?? '')
            : operator === ':+'
              ? isSet
                ? (word ?? '')
                : ''
              : (value ?? '');
        index += whole.length - 1;
      }
      hasWord = true;
    } else if (quote === '"') {
      if (char === '"') quote = undefined;
      else current += char;
    } else if (char === '"' || char === "'") {
      quote = char;
      hasWord = true;
    } else if (split && /\s/.test(char)) {
      if (hasWord) words.push(current);
      current = '';
      hasWord = false;
    } else {
      current += char;
      hasWord = true;
    }
  }
  if (quote !== undefined) refuse(line, `unterminated ${quote} quote`);
  if (hasWord || !split) words.push(current);
  return words;
}

/** One word: {@link processWords} without splitting. */
function processWord(text: string, variables: Readonly<Record<string, string>>, line: number): string {
  return processWords(text, variables, line, false)[0]!;
}

/** The JSON (exec) form of RUN, CMD, ENTRYPOINT, SHELL, COPY: an array of strings, or undefined. */
function jsonForm(text: string, line: number): string[] | undefined {
  if (!text.startsWith('[')) return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    // Docker falls back to the shell form when the brackets are not valid JSON.
    return undefined;
  }
  if (!Array.isArray(parsed) || !parsed.every((item) => typeof item === 'string'))
    refuse(line, 'the exec form must be a JSON array of strings');
  return parsed as string[];
}

/** `--name=value` flags at the start of an instruction, and the rest. */
function takeFlags(text: string): { flags: Map<string, string>; rest: string } {
  const flags = new Map<string, string>();
  let rest = text;
  for (let match = /^--([\w-]+)(?:=(\S*))?\s*/.exec(rest); match !== null; ) {
    flags.set(match[1]!, match[2] ?? '');
    rest = rest.slice(match[0].length);
    match = /^--([\w-]+)(?:=(\S*))?\s*/.exec(rest);
  }
  return { flags, rest };
}

/** `KEY=VALUE ...`, or the legacy `KEY VALUE` (one pair, the rest of the line its value). */
function keyValues(
  text: string,
  variables: Readonly<Record<string, string>>,
  line: number,
  what: string,
): Array<[string, string]> {
  const legacy = /^([^\s=]+)\s+([\s\S]*)$/.exec(text);
  if (legacy !== null) return [[legacy[1]!, processWord(legacy[2]!, variables, line)]];
  return processWords(text, variables, line).map((word) => {
    const separator = word.indexOf('=');
    if (separator <= 0) refuse(line, `${what} expects KEY=VALUE, got "${word}"`);
    return [word.slice(0, separator), word.slice(separator + 1)];
  });
}

/** A context path that stays inside the context (no absolute path, no `..` above it). */
function contextPath(source: string, line: number): string {
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(source))
    refuse(
      line,
      `a remote source (${source}) needs the network: download it into the task's environment/ folder`,
    );
  if (/[*?[]/.test(source))
    refuse(line, `wildcards in COPY sources (${source}) are not supported: name the files`);
  const normalized = posix.normalize(source.replace(/^\/+/, ''));
  if (normalized === '..' || normalized.startsWith('../'))
    refuse(line, `${source} is outside the build context (the environment/ folder)`);
  return normalized === '' ? '.' : normalized;
}

const ARCHIVE_SUFFIX = /\.(tar|tar\.gz|tgz|tar\.bz2|tbz2|tar\.xz|txz)$/i;

/**
 * Turns parsed instructions into a plan. `buildArgs` are the `--build-arg` values (ARG defaults
 * otherwise). The plan starts from the base image's own settings only at build time: here,
 * `settings.env` holds only what the Dockerfile sets.
 */
export function planDockerfile(
  instructions: readonly DockerfileInstruction[],
  buildArgs: Readonly<Record<string, string>> = {},
  /** The base image's working directory: where RUN starts before any WORKDIR. */
  baseWorkdir = '/',
): DockerfilePlan {
  const globalArgs: Record<string, string> = {};
  let base: string | undefined;
  const args: Record<string, string> = {};
  const env: Record<string, string> = {};
  const labels: Record<string, string> = {};
  let workdir = baseWorkdir === '' ? '/' : baseWorkdir;
  let user: string | undefined;
  let shell = ['/bin/sh', '-c'];
  let cmd: string[] | undefined;
  let entrypoint: string[] | undefined;
  const steps: BuildStep[] = [];
  const ignored: DockerfilePlan['ignored'] = [];
  const variables = () => ({ ...args, ...env });

  for (const { keyword, text, line } of instructions) {
    if (/<<-?["']?\w+/.test(text) && (keyword === 'RUN' || keyword === 'COPY'))
      refuse(line, 'heredocs need BuildKit: write the file into environment/ and COPY it');
    if (base === undefined && keyword !== 'FROM' && keyword !== 'ARG') refuse(line, `${keyword} before FROM`);
    switch (keyword) {
      case 'FROM': {
        if (base !== undefined)
          refuse(line, 'several FROM (a multi-stage build) are not supported: one base image per task');
        const { flags, rest } = takeFlags(text);
        if (flags.has('platform')) refuse(line, 'FROM --platform is not supported: the base must be local');
        const words = processWords(rest, globalArgs, line);
        if (words.length !== 1 && !(words.length === 3 && words[1]!.toUpperCase() === 'AS'))
          refuse(line, 'FROM expects an image name (and optionally AS name)');
        base = words[0]!;
        if (base === '') refuse(line, 'FROM names no image');
        break;
      }
      case 'ARG': {
        for (const word of processWords(text, base === undefined ? globalArgs : variables(), line)) {
          const separator = word.indexOf('=');
          const name = separator < 0 ? word : word.slice(0, separator);
          const fallback = separator < 0 ? undefined : word.slice(separator + 1);
          // After FROM, a bare `ARG NAME` brings a global ARG's value into the stage.
          const value = buildArgs[name] ?? fallback ?? (base === undefined ? undefined : globalArgs[name]);
          if (base === undefined) {
            if (value !== undefined) globalArgs[name] = value;
          } else if (value !== undefined) args[name] = value;
        }
        break;
      }
      case 'ENV':
        for (const [key, value] of keyValues(text, variables(), line, 'ENV')) env[key] = value;
        break;
      case 'LABEL':
        for (const [key, value] of keyValues(text, variables(), line, 'LABEL')) labels[key] = value;
        break;
      case 'WORKDIR': {
        const path = processWord(text, variables(), line);
        workdir = posix.resolve(workdir, path);
        steps.push({ kind: 'workdir', path: workdir, ...(user === undefined ? {} : { user }), line });
        break;
      }
      case 'USER':
        user = processWord(text, variables(), line);
        break;
      case 'SHELL': {
        const form = jsonForm(text, line);
        if (form === undefined || form.length === 0) refuse(line, 'SHELL expects a JSON array');
        shell = form;
        break;
      }
      case 'RUN': {
        const { flags, rest } = takeFlags(text);
        if (flags.size > 0)
          refuse(line, `RUN ${[...flags.keys()].map((flag) => `--${flag}`).join(' ')} needs BuildKit`);
        const argv = jsonForm(rest, line) ?? [...shell, rest];
        steps.push({
          kind: 'run',
          argv,
          workdir,
          env: { ...args, ...env },
          ...(user === undefined ? {} : { user }),
          line,
        });
        break;
      }
      case 'COPY':
      case 'ADD': {
        const { flags, rest } = takeFlags(text);
        for (const flag of flags.keys()) {
          if (flag === 'from') refuse(line, 'COPY --from (a multi-stage build) is not supported');
          if (flag !== 'chown' && flag !== 'chmod') refuse(line, `${keyword} --${flag} is not supported`);
        }
        const words = jsonForm(rest, line) ?? processWords(rest, variables(), line);
        if (words.length < 2) refuse(line, `${keyword} expects at least one source and a destination`);
        const rawDestination = words.at(-1)!;
        const sources = words.slice(0, -1).map((source) => {
          const path = contextPath(source, line);
          if (keyword === 'ADD' && ARCHIVE_SUFFIX.test(source))
            refuse(line, `ADD would unpack ${source}: unpack it with RUN tar after a COPY instead`);
          return path;
        });
        const isDirectory = rawDestination.endsWith('/') || sources.length > 1;
        const resolved = posix.resolve(workdir, rawDestination);
        const chown = flags.get('chown');
        const chmod = flags.get('chmod');
        if (chmod !== undefined && !/^[0-7]{3,4}$/.test(chmod))
          refuse(line, `--chmod=${chmod}: only octal modes are supported`);
        steps.push({
          kind: 'copy',
          sources,
          destination: isDirectory && resolved !== '/' ? `${resolved}/` : resolved,
          ...(chown === undefined || chown === '' ? {} : { chown: processWord(chown, variables(), line) }),
          ...(chmod === undefined || chmod === '' ? {} : { chmod }),
          line,
        });
        break;
      }
      case 'CMD':
        cmd = jsonForm(text, line) ?? [...shell, text];
        break;
      case 'ENTRYPOINT':
        entrypoint = jsonForm(text, line) ?? [...shell, text];
        break;
      case 'ONBUILD':
        refuse(line, 'ONBUILD is not supported');
        break;
      default:
        if (IGNORED.has(keyword)) ignored.push({ keyword, line });
        else refuse(line, `unknown instruction ${keyword}`);
    }
  }
  if (base === undefined) throw new GymError('VALIDATION_FAILED', 'the Dockerfile has no FROM');
  return {
    base,
    steps,
    settings: {
      env,
      workdir,
      ...(user === undefined ? {} : { user }),
      ...(cmd === undefined ? {} : { cmd }),
      ...(entrypoint === undefined ? {} : { entrypoint }),
      labels,
    },
    ignored,
  };
}
