/**
 * NeMo Gym's `env.yaml`, read as NeMo Gym reads it (OmegaConf): besides plain values, a string
 * may hold `${oc.env:VAR}` (the variable, an error when it is unset), `${oc.env:VAR,default}`
 * (the default when it is unset; `null` for none), and `${key}` / `${a.b}` (another value of the
 * same file). `\${` is a literal `${`. Any other resolver is refused, naming the key. A file read
 * without a host environment (one only found in the current directory) refuses `${oc.env:...}`.
 */
import { readFile } from 'node:fs/promises';
import { parse as parseYaml } from 'yaml';
import { GymError } from '../core/errors.ts';

type Value = unknown;
/** The process environment `${oc.env:...}` reads; null when the file may not read it (then any use is an error). */
type HostEnv = Readonly<Record<string, string | undefined>> | null;

const INTERPOLATION = /\\\$\{|\$\{([^{}]*)\}/g;

function fail(key: string, message: string): never {
  throw new GymError('VALIDATION_FAILED', `env.yaml ${key}: ${message}`, { details: { key } });
}

/** A default as OmegaConf's grammar reads it: quotes removed, `null` for none. */
function defaultValue(text: string): string | null {
  const trimmed = text.trim();
  if (trimmed === 'null') return null;
  const quoted = /^(['"])([\s\S]*)\1$/.exec(trimmed);
  return quoted === null ? trimmed : quoted[2]!;
}

function lookup(root: Record<string, Value>, path: string): Value {
  let node: Value = root;
  for (const part of path.split('.')) {
    if (typeof node !== 'object' || node === null || !(part in node)) return undefined;
    node = (node as Record<string, Value>)[part];
  }
  return node;
}

/** Resolves one interpolation body (what is between `${` and `}`). */
function resolveOne(
  body: string,
  key: string,
  root: Record<string, Value>,
  env: HostEnv,
  resolving: ReadonlySet<string>,
): Value {
  const resolver = /^\s*([\w.]+)\s*:([\s\S]*)$/.exec(body);
  if (resolver === null) {
    const path = body.trim();
    if (!/^[\w-]+(\.[\w-]+)*$/.test(path)) fail(key, `cannot read the interpolation \${${body}}`);
    if (resolving.has(path)) fail(key, `\${${path}} refers back to itself`);
    const target = lookup(root, path);
    if (target === undefined) fail(key, `\${${path}} names no key of this file`);
    return resolveValue(target, path, root, env, new Set([...resolving, path]));
  }
  if (resolver[1] !== 'oc.env')
    fail(key, `the resolver ${resolver[1]} is not supported here (only oc.env and references to keys)`);
  const comma = resolver[2]!.indexOf(',');
  const name = (comma < 0 ? resolver[2]! : resolver[2]!.slice(0, comma)).trim();
  if (name === '') fail(key, '${oc.env:} names no variable');
  if (env === null)
    fail(
      key,
      `\${oc.env:${name}} reads the host environment, which an env.yaml that was only found in the current directory may not (it could send a key to its own policy_base_url): give the file with --env-yaml to allow it`,
    );
  const value = env[name];
  if (value !== undefined) return value;
  if (comma < 0)
    fail(key, `the environment variable ${name} is not set (and \${oc.env:${name}} has no default)`);
  return defaultValue(resolver[2]!.slice(comma + 1));
}

function resolveValue(
  value: Value,
  key: string,
  root: Record<string, Value>,
  env: HostEnv,
  resolving: ReadonlySet<string>,
): Value {
  if (Array.isArray(value))
    return value.map((item, index) => resolveValue(item, `${key}.${index}`, root, env, resolving));
  if (typeof value === 'object' && value !== null)
    return Object.fromEntries(
      Object.entries(value).map(([name, item]) => [
        name,
        resolveValue(item, key === '' ? name : `${key}.${name}`, root, env, resolving),
      ]),
    );
  if (typeof value !== 'string') return value;
  // A value that is one interpolation keeps the resolved value's type (null, a number, a map).
  const whole = /^\$\{([^{}]*)\}$/.exec(value);
  if (whole !== null) return resolveOne(whole[1]!, key, root, env, resolving);
  return value.replace(INTERPOLATION, (_match, body?: string) => {
    if (body === undefined) return '${';
    const resolved = resolveOne(body, key, root, env, resolving);
    return resolved === null
      ? 'None'
      : typeof resolved === 'object'
        ? JSON.stringify(resolved)
        : String(resolved);
  });
}

/** Every interpolation of a parsed env.yaml resolved against `env` (the process environment). */
export function resolveEnvYaml(document: Record<string, Value>, env: HostEnv): Record<string, Value> {
  return resolveValue(document, '', document, env, new Set()) as Record<string, Value>;
}

/** Reads and resolves an env.yaml; an empty file is an empty map. */
export async function readEnvYaml(path: string, env: HostEnv): Promise<Record<string, Value>> {
  const parsed = parseYaml(await readFile(path, 'utf8')) as Value;
  if (parsed === null || parsed === undefined) return {};
  if (typeof parsed !== 'object' || Array.isArray(parsed))
    throw new GymError('VALIDATION_FAILED', `${path} must be a map of keys (policy_base_url: ..., ...)`);
  return resolveEnvYaml(parsed as Record<string, Value>, env);
}
