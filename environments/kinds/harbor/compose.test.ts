import { describe, expect, it } from 'vitest';
import { type ComposeContext, composeDurationMs, parseCompose, shellWords } from './compose.ts';

const context: ComposeContext = {
  composeDirectory: '/tasks/t1/environment',
  taskDirectory: '/tasks/t1',
  imageName: (service) => `gym/harbor-t1-${service}`,
  variables: { CONTEXT_DIR: '/tasks/t1/environment' },
  isHarnessVolume: (volume) => volume.startsWith('${HOST_'),
  isHarnessEnv: (entry) => entry === 'TEST_DIR=${T_BENCH_TEST_DIR}',
};

const parse = (text: string) => parseCompose(text, context);

describe('parseCompose', () => {
  it('reads a main service and its companions, with health checks and their order', () => {
    const task = parse(`
services:
  main:
    build:
      context: \${CONTEXT_DIR}
    command: ["sh", "-c", "sleep infinity"]
    environment:
      - DB_HOST=db
      - TEST_DIR=\${T_BENCH_TEST_DIR}
    depends_on:
      db:
        condition: service_healthy
    volumes:
      - \${HOST_VERIFIER_LOGS_PATH}:/logs/verifier
  db:
    build: ./db
    command: redis-server --port "6379" --save ''
    environment: { PASSWORD: secret, FROM_HOST: null }
    healthcheck:
      test: ["CMD-SHELL", "redis-cli ping"]
      interval: 1s
      timeout: 1m30s
      start_period: 500ms
      retries: 10
  api:
    image: gym/api:1
    entrypoint: /start.sh
    working_dir: /srv
    user: "1000"
    depends_on: [db]
    expose: ["8080"]
    restart: always
`);
    expect(task.main).toEqual({
      name: 'main',
      build: { context: '/tasks/t1/environment', dockerfile: '/tasks/t1/environment/Dockerfile' },
      env: { DB_HOST: 'db' },
    });
    expect(task.services).toEqual([
      {
        name: 'db',
        image: 'gym/harbor-t1-db',
        build: true,
        build_context: '/tasks/t1/environment/db',
        dockerfile: '/tasks/t1/environment/db/Dockerfile',
        command: ['redis-server', '--port', '6379', '--save', ''],
        env: { PASSWORD: 'secret', FROM_HOST: '${FROM_HOST}' },
        healthcheck: {
          argv: ['/bin/sh', '-c', 'redis-cli ping'],
          intervalMs: 1000,
          timeoutMs: 90_000,
          startPeriodMs: 500,
          retries: 10,
        },
        depends_on: [],
      },
      {
        name: 'api',
        image: 'gym/api:1',
        build: false,
        entrypoint: ['/start.sh'],
        env: {},
        workdir: '/srv',
        user: '1000',
        depends_on: [{ service: 'db', condition: 'started' }],
      },
    ]);
  });

  it("takes Terminal-Bench's client as the main service", () => {
    const task = parse('services:\n  client:\n    image: gym/app:1\n  server:\n    image: gym/server:1\n');
    expect(task.main).toEqual({ name: 'client', image: 'gym/app:1', env: {} });
    expect(task.services.map((service) => service.name)).toEqual(['server']);
  });

  it.each([
    [
      'privileged',
      'privileged: true',
      /service db: privileged is not supported: a privileged container reaches the host/,
    ],
    ['host network', 'network_mode: host', /network_mode host is not supported/],
    ['another network mode', 'network_mode: "service:main"', /network_mode service:main is not supported/],
    [
      'added capabilities',
      'cap_add: [NET_ADMIN]',
      /cap_add is not supported: added capabilities reach the host/,
    ],
    ['host devices', 'devices: ["/dev/kvm:/dev/kvm"]', /devices is not supported/],
    ['published ports', 'ports: ["8080:80"]', /ports is not supported: ports published on the host/],
    [
      'a bind mount out of the task',
      'volumes: ["/etc:/host-etc"]',
      /volumes \["\/etc:\/host-etc"\] are not supported: a bind mount reaches the host/,
    ],
    ['a relative bind mount', 'volumes: ["../..:/up"]', /volumes .* are not supported/],
    ['the host pid namespace', 'pid: host', /pid is not supported/],
    ['an env file', 'env_file: .env', /env_file is not supported: env files are read from the host/],
    ['an unknown key', 'frobnicate: 1', /service db: frobnicate is not supported$/],
    ['a network of its own', 'networks: [backend]', /networks backend: only the default network/],
    [
      'a build context outside the task',
      'build: ../../elsewhere',
      /the build context \.\.\/\.\.\/elsewhere is outside the task folder/,
    ],
    [
      'a Dockerfile outside its context',
      'build: { context: ., dockerfile: ../../Dockerfile }',
      /the Dockerfile \.\.\/\.\.\/Dockerfile is outside its build context/,
    ],
    [
      'a one-shot dependency',
      'depends_on: { main2: { condition: service_completed_successfully } }',
      /condition service_completed_successfully is not supported/,
    ],
    ['a dependency on no service', 'depends_on: [nowhere]', /depends_on nowhere, which is not a service/],
    ['a variable no one sets', 'build: ${SECRET_PATH}', /build.context reads the variable SECRET_PATH/],
  ])('refuses %s, naming it', (_what, line, message) => {
    const text = `services:\n  main:\n    image: gym/app:1\n  main2:\n    image: gym/x:1\n  db:\n    image: gym/db:1\n    ${line}\n`;
    expect(() => parse(text)).toThrow(message);
  });

  it('refuses named volumes, other networks, a main that depends on nothing and cycles', () => {
    expect(() => parse('services:\n  main: {}\nvolumes:\n  data: {}\n')).toThrow(
      /named volumes are not supported/,
    );
    expect(() => parse('services:\n  main: {}\nnetworks:\n  back: {}\n')).toThrow(/only the default network/);
    expect(() => parse('services:\n  a: {image: x}\n  b: {image: y}\n')).toThrow(/none is the main service/);
    expect(() =>
      parse('services:\n  main: {}\n  a: {image: x, depends_on: [b]}\n  b: {image: y, depends_on: [a]}\n'),
    ).toThrow(/in a circle: a -> b -> a/);
    expect(() => parse('services:\n  main: {}\n  a: {image: x, depends_on: [main]}\n')).toThrow(
      /service a depends on main, the agent's sandbox/,
    );
    expect(() => parse('services:\n  main: {}\n  Bad_Name: {image: x}\n')).toThrow(/must be a DNS label/);
    expect(() => parse('services:\n  main: {}\n  a: {}\n')).toThrow(/service a: has neither image nor build/);
    expect(() => parse('services: [\n')).toThrow(/not YAML/);
  });

  it("reads Docker's health check forms", () => {
    const check = (test: string) =>
      parse(`services:\n  main: {}\n  a:\n    image: x\n    healthcheck:\n      test: ${test}\n`).services[0]!
        .healthcheck;
    expect(check('["CMD", "pg_isready", "-h", "localhost"]')).toMatchObject({
      argv: ['pg_isready', '-h', 'localhost'],
      intervalMs: 30_000,
      timeoutMs: 30_000,
      retries: 3,
    });
    expect(check('curl -f http://localhost/')?.argv).toEqual(['/bin/sh', '-c', 'curl -f http://localhost/']);
    expect(check('["NONE"]')).toBeUndefined();
    expect(() => check('["WHAT"]')).toThrow(/healthcheck.test must be/);
  });
});

describe('composeDurationMs and shellWords', () => {
  it('reads durations as Compose writes them', () => {
    expect(composeDurationMs('1h2m3s', 'x')).toBe(3_723_000);
    expect(composeDurationMs('250ms', 'x')).toBe(250);
    expect(composeDurationMs(2, 'x')).toBe(2000);
    expect(() => composeDurationMs('soon', 'interval')).toThrow(/interval: "soon" is not a duration/);
    expect(() => composeDurationMs('1s later', 'interval')).toThrow(/is not a duration/);
  });

  it('splits commands into words without a shell', () => {
    expect(shellWords(`sh -c 'echo "a b"; exit 1'`)).toEqual(['sh', '-c', 'echo "a b"; exit 1']);
    expect(shellWords('a\\ b "c\\"d" \'\'')).toEqual(['a b', 'c"d', '']);
    expect(() => shellWords('echo "open')).toThrow(/unterminated/);
  });
});
