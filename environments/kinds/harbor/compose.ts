/**
 * The part of the Compose file format that multi-container benchmark tasks use (Harbor's
 * `environment/docker-compose.yaml`, Terminal-Bench's `docker-compose.yaml`), read into the main
 * service (the agent's sandbox) and its companions (`spec.services`: other containers in the
 * sandbox's network namespace, each name resolving to loopback).
 *
 * Read: `services` with `image` or `build` (a context inside the task folder, `dockerfile`),
 * `command`, `entrypoint`, `environment`, `healthcheck`, `depends_on` (`service_started`,
 * `service_healthy`), `working_dir`, `user`, `networks` (only the default network), and keys that
 * mean nothing beside one group on loopback (`container_name`, `hostname`, `expose`, `restart`,
 * `init`, `tty`, `stdin_open`, `labels`, `pull_policy`, `x-*`). The harnesses' own log mounts and
 * variables (Terminal-Bench's `${T_BENCH_*}`, Harbor's `${CONTEXT_DIR}`, log paths) are theirs.
 *
 * Refused, naming the key: what reaches the host or its network (`privileged`, `network_mode`
 * other than none, `cap_add`, `devices`, `ports`, bind mounts and volumes, `pid`, `ipc`,
 * `security_opt`, ...), a build context outside the task folder, `service_completed_successfully`,
 * and any key not listed here (a run never silently differs from the task's own).
 */
import { resolve, sep } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { MAX_SERVICES, serviceStartOrder } from '../../../core/schemas/services.ts';

/** A companion service as a task row carries it (JSON), its image built or named. */
export interface ComposeServiceRow {
  name: string;
  /** The image reference: built from `build_context` when `build`, else one the provider has. */
  image: string;
  build: boolean;
  build_context?: string;
  dockerfile?: string;
  command?: string[];
  entrypoint?: string[];
  /** `${VAR}` unresolved (resolved as the task's [environment] env is). */
  env: Record<string, string>;
  workdir?: string;
  user?: string;
  healthcheck?: {
    argv: string[];
    intervalMs: number;
    timeoutMs: number;
    startPeriodMs: number;
    retries: number;
  };
  depends_on: Array<{ service: string; condition: 'started' | 'healthy' }>;
}

/** The main service: what the agent's sandbox takes from it. */
export interface ComposeMain {
  name: string;
  /** Its build (context and Dockerfile, absolute), when it has one. */
  build?: { context: string; dockerfile?: string };
  image?: string;
  env: Record<string, string>;
  workdir?: string;
}

export interface ComposeTask {
  main: ComposeMain;
  services: ComposeServiceRow[];
}

export interface ComposeContext {
  /** The folder the Compose file is in (relative build contexts start here). */
  composeDirectory: string;
  /** The task folder: every build context must be inside it. */
  taskDirectory: string;
  /** Names the images built for companion services (`<repository>:<tag of the context>` later). */
  imageName: (service: string) => string;
  /**
   * The main service's name when the harness adds it itself (Harbor merges its own `main` over
   * the task's file, which may leave it out); else Terminal-Bench's `client`, or the only service.
   */
  mainName?: string;
  /** Variables the harness itself sets (Harbor's CONTEXT_DIR), replaced where they appear. */
  variables: Readonly<Record<string, string>>;
  /** Volume entries the harness adds itself (log mounts): ignored. */
  isHarnessVolume: (volume: string) => boolean;
  /** Environment entries the harness adds itself (`TEST_DIR=${T_BENCH_TEST_DIR}`): ignored. */
  isHarnessEnv: (entry: string) => boolean;
}

/** Service keys read into the group. */
const READ_KEYS = new Set([
  'image',
  'build',
  'command',
  'entrypoint',
  'environment',
  'healthcheck',
  'depends_on',
  'working_dir',
  'user',
  'networks',
  'volumes',
  'network_mode',
]);
/** Service keys that mean nothing for a group on one loopback (names, restart policy, terminals). */
const IGNORED_KEYS = new Set([
  'container_name',
  'hostname',
  'expose',
  'restart',
  'init',
  'tty',
  'stdin_open',
  'labels',
  'pull_policy',
  'platform',
  'stop_grace_period',
  'stop_signal',
]);
/** Keys refused with the reason a user needs (the others: "not supported"). */
const REFUSED_KEYS: Record<string, string> = {
  privileged: 'a privileged container reaches the host',
  cap_add: 'added capabilities reach the host',
  devices: 'host devices reach the host',
  ports: 'ports published on the host open the group to the host (its services reach each other on loopback)',
  pid: "the host's process namespace reaches the host",
  ipc: "another namespace's IPC is not the group's",
  security_opt: 'security options loosen the confinement',
  userns_mode: 'the host user namespace reaches the host',
  cgroup_parent: "another cgroup is not the group's",
  sysctls: 'kernel settings are not the task',
  extra_hosts: 'the group names only its own services',
  dns: 'the group has no network to resolve names on',
  env_file: 'env files are read from the host (put the values in environment)',
  links: 'every service is reached by its name already',
  external_links: 'nothing outside the group is reached',
  runtime: 'the operator chooses the runtime',
  deploy: 'replicas and placement are not a task group',
  scale: 'replicas are not a task group',
};

/** The main service: Harbor names it `main`, Terminal-Bench `client`; else the only one. */
function mainName(names: readonly string[]): string | undefined {
  if (names.includes('main')) return 'main';
  if (names.includes('client')) return 'client';
  return names.length === 1 ? names[0] : undefined;
}

/** Compose's durations (`1m30s`, `500ms`, `10s`, a bare number of seconds) in milliseconds. */
export function composeDurationMs(value: unknown, field: string): number {
  if (typeof value === 'number' && value >= 0) return Math.round(value * 1000);
  const text = String(value).trim();
  const units: Record<string, number> = { h: 3_600_000, m: 60_000, s: 1000, ms: 1, us: 0.001, ns: 0.000001 };
  const parts = [...text.matchAll(/(\d+(?:\.\d+)?)(h|ms|m|s|us|ns)/g)];
  if (parts.length === 0 || parts.map((part) => part[0]).join('') !== text)
    throw new Error(`${field}: ${JSON.stringify(value)} is not a duration (like 1m30s, 500ms)`);
  return Math.round(parts.reduce((sum, part) => sum + Number(part[1]) * units[part[2]!]!, 0));
}

/** A string command split as Compose splits one (shell words, no shell): quotes group, `\` escapes. */
export function shellWords(text: string): string[] {
  const words: string[] = [];
  let word: string | null = null;
  let quote: '"' | "'" | null = null;
  for (let index = 0; index < text.length; index += 1) {
    const char = text[index]!;
    if (quote !== null) {
      if (char === quote) quote = null;
      else if (char === '\\' && quote === '"' && index + 1 < text.length) word = (word ?? '') + text[++index];
      else word = (word ?? '') + char;
    } else if (char === "'" || char === '"') {
      quote = char;
      word ??= '';
    } else if (char === '\\' && index + 1 < text.length) word = (word ?? '') + text[++index];
    else if (/\s/.test(char)) {
      if (word !== null) words.push(word);
      word = null;
    } else word = (word ?? '') + char;
  }
  if (quote !== null) throw new Error(`unterminated ${quote} in ${JSON.stringify(text)}`);
  if (word !== null) words.push(word);
  return words;
}

const asRecord = (value: unknown): Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value)
    ? (value as Record<string, unknown>)
    : {};

/** Parses and checks a Compose file; throws an Error whose message names the service and key. */
export function parseCompose(text: string, context: ComposeContext): ComposeTask {
  let document: unknown;
  try {
    document = parseYaml(text);
  } catch (error) {
    throw new Error(`not YAML: ${(error as Error).message}`);
  }
  const top = asRecord(document);
  for (const key of Object.keys(top)) {
    if (key === 'services' || key === 'version' || key === 'name' || key.startsWith('x-')) continue;
    if (key === 'networks') {
      const networks = Object.keys(asRecord(top.networks));
      if (networks.every((name) => name === 'default')) continue;
      throw new Error(
        `networks ${networks.join(', ')}: only the default network is supported (a group's services share one loopback)`,
      );
    }
    if (key === 'volumes')
      throw new Error('volumes: named volumes are not supported (a group keeps no state beyond itself)');
    throw new Error(`${key} is not supported`);
  }
  const services = asRecord(top.services);
  const names = Object.keys(services);
  const main = context.mainName ?? mainName(names);
  if (main === undefined)
    throw new Error(
      `${names.length === 0 ? 'no service' : `services ${names.join(', ')}`}: none is the main service (Harbor's main, Terminal-Bench's client)`,
    );
  if (names.length - 1 > MAX_SERVICES)
    throw new Error(`${names.length - 1} services beside ${main}: at most ${MAX_SERVICES} are supported`);
  const companions = names
    .filter((name) => name !== main)
    .map((name) => readService(name, asRecord(services[name]), context, [...names, main]));
  const order = serviceStartOrder(
    companions.map((service) => ({
      ...service,
      env: {},
      dependsOn: service.depends_on.filter((dependency) => dependency.service !== main),
    })),
  );
  if (typeof order === 'string') throw new Error(order);
  for (const service of companions)
    if (service.depends_on.some((dependency) => dependency.service === main))
      throw new Error(
        `service ${service.name} depends on ${main}, the agent's sandbox: the sandbox starts first and runs nothing of its own`,
      );
  // The main service keeps only what its sandbox takes; its own dependencies start before the agent anyway.
  const mainService = readService(main, asRecord(services[main]), context, [...names, main], true);
  return {
    main: {
      name: main,
      ...(mainService.build ? { build: buildOf(mainService) } : {}),
      ...(!mainService.build && mainService.image !== '' ? { image: mainService.image } : {}),
      env: mainService.env,
      ...(mainService.workdir === undefined ? {} : { workdir: mainService.workdir }),
    },
    services: companions.map((service) => ({
      ...service,
      depends_on: service.depends_on.filter((dependency) => dependency.service !== main),
    })),
  };
}

const buildOf = (service: ComposeServiceRow) => ({
  context: service.build_context!,
  ...(service.dockerfile === undefined ? {} : { dockerfile: service.dockerfile }),
});

function readService(
  name: string,
  service: Record<string, unknown>,
  context: ComposeContext,
  names: readonly string[],
  isMain = false,
): ComposeServiceRow {
  const fail = (message: string): never => {
    throw new Error(`service ${name}: ${message}`);
  };
  if (!isMain && !/^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/.test(name))
    fail('its name must be a DNS label (lower-case letters, digits, inner dashes) to resolve as a host name');
  for (const key of Object.keys(service)) {
    if (READ_KEYS.has(key) || IGNORED_KEYS.has(key) || key.startsWith('x-')) continue;
    const reason = REFUSED_KEYS[key];
    fail(`${key} is not supported${reason === undefined ? '' : `: ${reason}`}`);
  }
  const substitute = (value: string, field: string): string =>
    value.replace(/\$\{([A-Za-z_]\w*)(?::?-([^}]*))?\}/g, (match, variable: string, fallback?: string) => {
      const known = context.variables[variable];
      if (known !== undefined) return known;
      if (fallback !== undefined) return fallback;
      return fail(`${field} reads the variable ${variable}, which the task does not set (${match})`);
    });
  if (service.network_mode !== undefined && service.network_mode !== 'none')
    fail(
      `network_mode ${String(service.network_mode)} is not supported: the group shares the sandbox's own network`,
    );
  const networks = Array.isArray(service.networks)
    ? service.networks.map(String)
    : Object.keys(asRecord(service.networks));
  if (networks.some((network) => network !== 'default'))
    fail(`networks ${networks.join(', ')}: only the default network is supported`);
  const volumes = Array.isArray(service.volumes)
    ? service.volumes
    : service.volumes === undefined
      ? []
      : [service.volumes];
  const own = volumes.filter((volume) => typeof volume !== 'string' || !context.isHarnessVolume(volume));
  if (own.length > 0)
    fail(
      `volumes ${JSON.stringify(own)} are not supported: a bind mount reaches the host, and a group keeps no volume (copy files in its Dockerfile)`,
    );
  const row: ComposeServiceRow = {
    name,
    image: '',
    build: false,
    env: readEnvironment(service.environment, context),
    depends_on: [],
  };
  const build = service.build;
  if (build !== undefined) {
    const { context: buildContext = '.', dockerfile } =
      typeof build === 'string'
        ? { context: build, dockerfile: undefined }
        : (asRecord(build) as { context?: string; dockerfile?: string });
    const extra =
      typeof build === 'string'
        ? []
        : Object.keys(asRecord(build)).filter((key) => key !== 'context' && key !== 'dockerfile');
    if (extra.length > 0) fail(`build: ${extra.join(', ')} is not supported`);
    const contextPath = resolve(context.composeDirectory, substitute(String(buildContext), 'build.context'));
    const taskDirectory = resolve(context.taskDirectory);
    if (contextPath !== taskDirectory && !contextPath.startsWith(taskDirectory + sep))
      fail(`the build context ${String(buildContext)} is outside the task folder`);
    const dockerfilePath = resolve(
      contextPath,
      substitute(String(dockerfile ?? 'Dockerfile'), 'build.dockerfile'),
    );
    if (!dockerfilePath.startsWith(contextPath + sep))
      fail(`the Dockerfile ${String(dockerfile)} is outside its build context`);
    row.build = true;
    row.build_context = contextPath;
    row.dockerfile = dockerfilePath;
    row.image = context.imageName(name);
  } else if (typeof service.image === 'string') {
    if (!isMain && service.image.includes('${'))
      fail(`image ${service.image}: a variable names no image here`);
    row.image = service.image.includes('${') ? '' : service.image;
  } else if (!isMain) fail('has neither image nor build');
  const words = (value: unknown, field: string): string[] | undefined => {
    if (value === undefined || value === null) return undefined;
    if (typeof value === 'string') return shellWords(value);
    if (Array.isArray(value)) return value.map(String);
    return fail(`${field} must be a string or a list`);
  };
  const command = words(service.command, 'command');
  const entrypoint = words(service.entrypoint, 'entrypoint');
  if (command !== undefined) row.command = command;
  if (entrypoint !== undefined) row.entrypoint = entrypoint;
  if (service.working_dir !== undefined) {
    const workdir = substitute(String(service.working_dir), 'working_dir');
    if (!workdir.startsWith('/')) fail(`working_dir ${workdir} is not an absolute path`);
    row.workdir = workdir;
  }
  if (service.user !== undefined) row.user = String(service.user);
  const healthcheck = readHealthcheck(service.healthcheck, fail);
  if (healthcheck !== undefined) row.healthcheck = healthcheck;
  row.depends_on = readDependsOn(service.depends_on, names, fail);
  return row;
}

function readEnvironment(environment: unknown, context: ComposeContext): Record<string, string> {
  const entries: Array<[string, string]> = Array.isArray(environment)
    ? environment
        .map(String)
        .filter((entry) => !context.isHarnessEnv(entry))
        .map((entry) => {
          const at = entry.indexOf('=');
          return at === -1 ? [entry, `\${${entry}}`] : [entry.slice(0, at), entry.slice(at + 1)];
        })
    : Object.entries(asRecord(environment))
        .filter(([key, value]) => !context.isHarnessEnv(`${key}=${String(value)}`))
        .map(([key, value]) => [key, value === null ? `\${${key}}` : String(value)]);
  return Object.fromEntries(entries);
}

function readHealthcheck(value: unknown, fail: (message: string) => never): ComposeServiceRow['healthcheck'] {
  if (value === undefined || value === null) return undefined;
  const check = asRecord(value);
  if (check.disable === true) return undefined;
  const extra = Object.keys(check).filter(
    (key) =>
      !['test', 'interval', 'timeout', 'retries', 'start_period', 'start_interval', 'disable'].includes(key),
  );
  if (extra.length > 0) fail(`healthcheck: ${extra.join(', ')} is not supported`);
  const test = check.test;
  let argv: string[];
  if (typeof test === 'string') argv = ['/bin/sh', '-c', test];
  else if (Array.isArray(test) && test[0] === 'CMD') argv = test.slice(1).map(String);
  else if (Array.isArray(test) && test[0] === 'CMD-SHELL')
    argv = ['/bin/sh', '-c', test.slice(1).map(String).join(' ')];
  else if (Array.isArray(test) && test[0] === 'NONE') return undefined;
  else return fail('healthcheck.test must be a string, ["CMD", ...], ["CMD-SHELL", "..."] or ["NONE"]');
  if (argv.length === 0) fail('healthcheck.test runs nothing');
  const duration = (key: string, fallback: number) => {
    try {
      return check[key] === undefined ? fallback : composeDurationMs(check[key], `healthcheck.${key}`);
    } catch (error) {
      return fail((error as Error).message);
    }
  };
  // Docker's defaults: 30 s interval and timeout, 3 retries, no start period.
  const retries = check.retries === undefined ? 3 : Number(check.retries);
  if (!Number.isInteger(retries) || retries < 1) fail('healthcheck.retries must be a positive whole number');
  return {
    argv,
    intervalMs: Math.max(1, duration('interval', 30_000)),
    timeoutMs: Math.max(1, duration('timeout', 30_000)),
    startPeriodMs: duration('start_period', 0),
    retries,
  };
}

function readDependsOn(
  value: unknown,
  names: readonly string[],
  fail: (message: string) => never,
): ComposeServiceRow['depends_on'] {
  if (value === undefined || value === null) return [];
  const entries: Array<[string, unknown]> = Array.isArray(value)
    ? value.map((name) => [String(name), { condition: 'service_started' }])
    : Object.entries(asRecord(value));
  return entries.map(([service, options]) => {
    if (!names.includes(service)) fail(`depends_on ${service}, which is not a service of the file`);
    const condition = asRecord(options).condition ?? 'service_started';
    if (condition === 'service_started') return { service, condition: 'started' as const };
    if (condition === 'service_healthy') return { service, condition: 'healthy' as const };
    return fail(
      `depends_on ${service}: condition ${String(condition)} is not supported (service_started, service_healthy)`,
    );
  });
}
