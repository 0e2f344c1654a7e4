/** What a Harbor dataset may take from the host: no operator variables unless allowed, no host folders from JSONL rows, no more resources than the operator's cap. */
import { mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type LoadedEnvironment, loadEnvironment, readRows } from '../../environment.ts';
import { inferEnvironment } from '../../infer-format.ts';
import { parseRow } from '../kind.ts';
import { kind } from './kind.ts';
import { readHarborTask } from './task-directory.ts';

const SECRET = 'sk-operator-secret-harbor-test';
let harbor: LoadedEnvironment;
beforeAll(async () => {
  harbor = await loadEnvironment('harbor');
});
afterEach(() => {
  delete process.env.GYM_HARBOR_TEST_SECRET;
});

async function taskDir(toml: string, parent?: string): Promise<string> {
  const dir = parent === undefined ? await mkdtemp(join(tmpdir(), 'harbor-kind-')) : parent;
  await mkdir(join(dir, 'tests'), { recursive: true });
  await writeFile(join(dir, 'tests', 'test.sh'), 'echo 1 > /logs/verifier/reward.txt\n');
  await writeFile(join(dir, 'instruction.md'), 'do it\n');
  await writeFile(join(dir, 'task.toml'), toml);
  return dir;
}

const sandboxOf = (row: Record<string, unknown>, environment = harbor) =>
  kind.sandbox!(row, environment) as { env: Record<string, string>; resources: Record<string, number> };

describe("a task's ${VAR} and the operator's environment", () => {
  it("does not copy an operator's variable into the sandbox, verifier or oracle unless it is allowed", async () => {
    process.env.GYM_HARBOR_TEST_SECRET = SECRET;
    for (const table of ['environment', 'verifier', 'solution']) {
      const row = await readHarborTask(
        await taskDir(
          `[${table}]\nenv = { LOOT = "\${GYM_HARBOR_TEST_SECRET}" }\n${table === 'environment' ? 'docker_image = "busybox"\n' : '[environment]\ndocker_image = "busybox"\n'}`,
        ),
      );
      expect(() => kind.checkRow!(row, harbor)).toThrow(
        `task.toml [${table}] env LOOT reads the host variable GYM_HARBOR_TEST_SECRET, which a task may read only when the operator allows it: gym eval run --task-env GYM_HARBOR_TEST_SECRET`,
      );
    }
    const row = await readHarborTask(
      await taskDir(
        `[environment]\ndocker_image = "busybox"\nenv = { LOOT = "\${GYM_HARBOR_TEST_SECRET}" }\n`,
      ),
    );
    expect(() => sandboxOf(row)).toThrow(/GYM_HARBOR_TEST_SECRET/);
  });

  it('gives a variable that is not allowed its default, never its value', async () => {
    process.env.GYM_HARBOR_TEST_SECRET = SECRET;
    const row = await readHarborTask(
      await taskDir(
        '[environment]\ndocker_image = "busybox"\nenv = { LOOT = "${GYM_HARBOR_TEST_SECRET:-none}|${GYM_HARBOR_TEST_UNSET:-x}" }\n',
      ),
    );
    kind.checkRow!(row, harbor);
    expect(sandboxOf(row).env.LOOT).toBe('none|x');
  });

  it('reads the variables the operator names (options.taskEnv, which --task-env adds to)', async () => {
    process.env.GYM_HARBOR_TEST_SECRET = SECRET;
    const allowing = { ...harbor, options: { ...harbor.options, taskEnv: ['GYM_HARBOR_TEST_SECRET'] } };
    const row = await readHarborTask(
      await taskDir(
        '[environment]\ndocker_image = "busybox"\nenv = { KEY = "${GYM_HARBOR_TEST_SECRET}" }\n[verifier]\nenv = { KEY = "${GYM_HARBOR_TEST_SECRET}" }\n',
      ),
    );
    kind.checkRow!(row, allowing);
    expect(sandboxOf(row, allowing).env.KEY).toBe(SECRET);
    delete process.env.GYM_HARBOR_TEST_SECRET;
    expect(() => kind.checkRow!(row, allowing)).toThrow(
      'task.toml [environment] env KEY: the environment variable GYM_HARBOR_TEST_SECRET is not set',
    );
  });
});

describe('a JSONL row naming a task directory', () => {
  it("may name only a folder under the file's own folder, never another host folder", async () => {
    const outside = await taskDir('[environment]\ndocker_image = "busybox"\n');
    const folder = await mkdtemp(join(tmpdir(), 'harbor-jsonl-'));
    const inside = await taskDir('[environment]\ndocker_image = "busybox"\n', join(folder, 'task-a'));
    await symlink(outside, join(folder, 'task-link'));
    const row = { ...(await readHarborTask(inside)) };
    const write = async (taskDirValue: unknown) => {
      const file = join(folder, 'rows.jsonl');
      await writeFile(file, `${JSON.stringify({ ...row, task_dir: taskDirValue })}\n`);
      return file;
    };
    // A plain JSONL with Harbor's fields is taken for Harbor rows: its task_dir is what is copied.
    const file = await write(outside);
    await expect(readRows(file)).rejects.toThrow(/rows\.jsonl:1: task_dir ".*" is not a folder under/);
    await expect(readRows(await write(join(folder, 'task-link')))).rejects.toThrow(/is not a folder under/);
    await expect(readRows(await write(folder))).rejects.toThrow(/is not a folder under/);
    await expect(readRows(await write(`${inside}/../../`))).rejects.toThrow(/is not a folder under/);
    const rows = await readRows(await write('task-a'));
    expect(rows[0]!.task_dir).toMatch(/harbor-jsonl-.*\/task-a$/);
    expect(inferEnvironment(rows, file).environment).toBe('harbor');
    expect(parseRow(kind, rows[0]!, 0).task_dir).toBe(rows[0]!.task_dir);
  });
});

describe("a task's resources", () => {
  it("gets what it asks for over the environment's defaults, and is refused (never lowered) past the operator's cap", async () => {
    // Seen: memory_mb = 2048 ran with the environment's 512 MiB, and only a warning said so.
    const row = await readHarborTask(
      await taskDir('[environment]\ndocker_image = "busybox"\ncpus = 2\nmemory_mb = 2048\n'),
    );
    // environments/harbor's defaults are 1 CPU and 512 MiB: the task's own values win.
    expect(sandboxOf(row).resources).toEqual({ cpus: 2, memoryMiB: 2048, pidsLimit: 256 });
    expect(() => kind.checkRow!(row, harbor)).not.toThrow();
    const capped = { ...harbor, options: { ...harbor.options, maxResources: { cpus: 4, memoryMiB: 1024 } } };
    expect(() => kind.checkRow!(row, capped)).toThrow(
      'task.toml asks for memory_mb = 2048, more than the operator allows (maxResources.memoryMiB is 1024)',
    );
    const small = await readHarborTask(
      await taskDir('[environment]\ndocker_image = "busybox"\ncpus = 0.5\nmemory_mb = 128\n'),
    );
    expect(sandboxOf(small, capped).resources).toEqual({ cpus: 0.5, memoryMiB: 128, pidsLimit: 256 });
    expect(() => kind.checkRow!(small, capped)).not.toThrow();
  });
});

it('refuses a build_timeout_sec over an hour, naming the field', async () => {
  const dir = await taskDir('[environment]\ndocker_image = "busybox"\nbuild_timeout_sec = 604800\n');
  await expect(readHarborTask(dir)).rejects.toThrow(
    'task.toml: environment.build_timeout_sec: must be at most 3600 s (1 hour)',
  );
  expect(kind.rowSchema.safeParse({ build_timeout_sec: 604800 }).error?.issues).toContainEqual(
    expect.objectContaining({ path: ['build_timeout_sec'] }),
  );
});

describe("a task's links to the host", () => {
  it('refuses a link out of environment/ (COPY through it reads a host file) and a linked tests/ folder', async () => {
    const host = await mkdtemp(join(tmpdir(), 'harbor-host-'));
    await writeFile(join(host, 'id_rsa'), 'operator key\n');
    const dir = await taskDir('[environment]\nbuild_timeout_sec = 60\n');
    await mkdir(join(dir, 'environment'));
    await writeFile(join(dir, 'environment', 'Dockerfile'), 'FROM gym/busybox\nCOPY keys/id_rsa /root/\n');
    await symlink(host, join(dir, 'environment', 'keys'));
    await expect(readHarborTask(dir)).rejects.toThrow(
      'environment/keys is a symbolic link out of environment/ (a build could copy host files through it)',
    );
    // A link that stays inside is fine.
    await rm(join(dir, 'environment', 'keys'));
    await mkdir(join(dir, 'environment', 'files'));
    await symlink('files', join(dir, 'environment', 'keys'));
    await expect(readHarborTask(dir)).resolves.toMatchObject({ build: true });
    const linked = await taskDir('[environment]\ndocker_image = "busybox"\n');
    await rm(join(linked, 'tests'), { recursive: true });
    await mkdir(join(host, 'tests'));
    await writeFile(join(host, 'tests', 'test.sh'), 'true\n');
    await symlink(join(host, 'tests'), join(linked, 'tests'));
    await expect(readHarborTask(linked)).rejects.toThrow('tests/ is a symbolic link');
  });
});

describe("a dataset's links to the host's files", () => {
  const tbTask = async (): Promise<string> => {
    const task = await mkdtemp(join(tmpdir(), 'tb-links-'));
    await writeFile(join(task, 'task.yaml'), 'instruction: Do the thing.\nmax_agent_timeout_sec: 90\n');
    // The compose file names an image: nothing is built, so no build context is checked.
    await writeFile(
      join(task, 'docker-compose.yaml'),
      'services:\n  client:\n    image: gym/busybox:latest\n',
    );
    await mkdir(join(task, 'tests'));
    await writeFile(join(task, 'tests', 'test_outputs.py'), 'def test_x(): pass\n');
    await writeFile(join(task, 'run-tests.sh'), 'pytest -rA $TEST_DIR\n');
    await writeFile(join(task, 'solution.sh'), 'true\n');
    return task;
  };
  let host: string;
  beforeAll(async () => {
    host = await mkdtemp(join(tmpdir(), 'dataset-host-'));
    await mkdir(join(host, '.ssh'));
    await writeFile(join(host, '.ssh', 'id_rsa'), 'operator key\n');
    await writeFile(join(host, 'notes.yaml'), 'instruction: the operator key is in ~/.ssh\n');
  });

  it.each([
    ['tests', 'a host folder', (): string => join(host, '.ssh'), 'tests/ is a symbolic link'],
    [
      'run-tests.sh',
      'a host file',
      (): string => join(host, '.ssh', 'id_rsa'),
      'run-tests.sh is a symbolic link out of the task',
    ],
    [
      'solution.sh',
      'a host file',
      (): string => join(host, '.ssh', 'id_rsa'),
      'solution.sh is a symbolic link out of the task',
    ],
    [
      'task.yaml',
      'a host file',
      (): string => join(host, 'notes.yaml'),
      'task.yaml is a symbolic link out of the task',
    ],
    [
      'run-tests.sh',
      'a relative path climbing out',
      (): string => '../../../../../../../../etc/passwd',
      'run-tests.sh is a symbolic link out of the task',
    ],
  ] as const)(
    'refuses a Terminal-Bench task whose %s is a link to %s',
    async (name, _what, target, message) => {
      const task = await tbTask();
      await rm(join(task, name), { recursive: true });
      await symlink(target(), join(task, name));
      await expect(readRows(task)).rejects.toThrow(message);
      await rm(task, { recursive: true, force: true });
    },
  );

  it('takes a link that stays inside the task', async () => {
    const task = await tbTask();
    await mkdir(join(task, 'scripts'));
    await writeFile(join(task, 'scripts', 'run.sh'), 'pytest $TEST_DIR\n');
    await rm(join(task, 'run-tests.sh'));
    await symlink('scripts/run.sh', join(task, 'run-tests.sh'));
    await expect(readRows(task)).resolves.toHaveLength(1);
    await rm(task, { recursive: true, force: true });
  });

  it("refuses a Harbor task whose instruction (the prompt, and the results') is a link out", async () => {
    const dir = await taskDir('[environment]\ndocker_image = "busybox"\n');
    await rm(join(dir, 'instruction.md'));
    await symlink(join(host, '.ssh', 'id_rsa'), join(dir, 'instruction.md'));
    await expect(readHarborTask(dir)).rejects.toThrow('instruction.md is a symbolic link out of the task');
  });

  it('refuses, when the files are used, a task read before its files became links', async () => {
    // A JSONL row names its task folder: the folder may change after it was read.
    const task = await tbTask();
    const [row] = await readRows(task);
    await rm(join(task, 'solution.sh'));
    await symlink(join(host, '.ssh', 'id_rsa'), join(task, 'solution.sh'));
    expect(() => kind.task!(row!, harbor, { usesGoldPatch: true } as never)).toThrow(
      'solution.sh is a symbolic link out of the task',
    );
    await rm(join(task, 'tests'), { recursive: true });
    await symlink(join(host, '.ssh'), join(task, 'tests'));
    const untouched = new Proxy(
      {},
      {
        get: () => {
          throw new Error('the sandbox was used');
        },
      },
    );
    const { verifyScript } = await import('../../verifiers/script.ts');
    await expect(verifyScript(untouched as never, join(task, 'tests'), 1000)).rejects.toMatchObject({
      code: 'VALIDATION_FAILED',
    });
    await rm(task, { recursive: true, force: true });
  });
});

describe('a folder of tasks, each on its own', () => {
  it("refuses each task it cannot run with the feature's name, and reads the others", async () => {
    // Seen: one unsupported task aborted the whole folder, and Compose and MCP tasks passed unremarked.
    const folder = await mkdtemp(join(tmpdir(), 'harbor-folder-'));
    const ok = '[environment]\ndocker_image = "busybox"\n';
    await taskDir(ok, join(folder, 'a-good'));
    await taskDir(ok, join(folder, 'b-compose'));
    await mkdir(join(folder, 'b-compose', 'environment'));
    await writeFile(
      join(folder, 'b-compose', 'environment', 'docker-compose.yaml'),
      'services:\n  db:\n    image: busybox\n    privileged: true\n',
    );
    // An MCP server over HTTP must be a service of the task's group: nothing else is reachable.
    await taskDir(
      `${ok}[[environment.mcp_servers]]\nname = "search"\ntransport = "streamable-http"\nurl = "http://mcp.example/mcp"\n`,
      join(folder, 'c-mcp'),
    );
    await taskDir(`${ok}[verifier.environment]\ncpus = 1\n`, join(folder, 'd-separate'));
    await taskDir('[environment\nbroken', join(folder, 'e-broken'));
    const rows = await readRows(folder);
    expect(rows.map((row) => [row.id, row.refused === undefined])).toEqual([
      [rows[0]!.id, true],
      ['b-compose', false],
      ['c-mcp', false],
      ['d-separate', false],
      ['e-broken', false],
    ]);
    const reasons = rows.slice(1).map((row) => String(row.refused));
    expect(reasons[0]).toMatch(
      /environment\/docker-compose\.yaml: service db: privileged is not supported: a privileged container reaches the host/,
    );
    expect(reasons[1]).toMatch(/\[\[environment\.mcp_servers\]\] search: an MCP server must be a service/);
    expect(reasons[2]).toMatch(/a separate verifier is built from tests\/Dockerfile .* and there is none/);
    expect(reasons[3]).toMatch(/task\.toml cannot be read/);
    // The run fails each with its reason alone, never with the fields a refused row lacks.
    expect(() => parseRow(kind, rows[1]!, 1)).toThrow(
      /is not a valid harbor task: \(row\): .*privileged is not supported/,
    );
    expect(inferEnvironment(rows, folder).environment).toBe('harbor');
    await rm(folder, { recursive: true, force: true });
  });

  it('reads a Terminal-Bench task.yaml folder with its other services, and refuses what reaches the host', async () => {
    const task = await mkdtemp(join(tmpdir(), 'tb-kind-'));
    await writeFile(
      join(task, 'task.yaml'),
      'instruction: |-\n  Do the thing.\nauthor_name: x\ndifficulty: easy\nparser_name: pytest\nmax_agent_timeout_sec: 90.0\nrun_tests_in_same_shell: false\n',
    );
    await writeFile(join(task, 'Dockerfile'), 'FROM gym/busybox:latest\nWORKDIR /work\n');
    await writeFile(join(task, 'run-tests.sh'), 'pytest -rA $TEST_DIR\n');
    const compose = (service: string) =>
      writeFile(
        join(task, 'docker-compose.yaml'),
        `services:\n  client:\n    build:\n      dockerfile: Dockerfile\n    image: \${T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME}\n    environment:\n      - TEST_DIR=\${T_BENCH_TEST_DIR}\n      - MODE=fast\n${service}`,
      );
    await compose('');
    const [row] = await readRows(task);
    expect(row).toMatchObject({
      instruction: 'Do the thing.',
      workdir: '/work',
      build: true,
      agent_timeout_sec: 90,
      verifier_timeout_sec: 60,
      environment_env: { MODE: 'fast' },
      format: 'terminal-bench',
    });
    expect(() => parseRow(kind, row!, 0)).not.toThrow();
    for (const [extra, reason] of [
      ['    ports:\n      - "8080:8080"\n', /service client: ports is not supported/],
      ['    volumes:\n      - /etc:/host-etc\n', /volumes \["\/etc:\/host-etc"\] are not supported/],
      ['networks:\n  outside: {}\n', /networks outside: only the default network is supported/],
      [
        '  db:\n    image: gym/db:1\n    network_mode: host\n',
        /service db: network_mode host is not supported/,
      ],
      [
        '  db:\n    build: ../elsewhere\n',
        /service db: the build context \.\.\/elsewhere is outside the task folder/,
      ],
    ] as const) {
      await compose(extra);
      await expect(readRows(task)).rejects.toThrow(reason);
    }
    // A database beside the client: a companion service of the agent's sandbox, built from the task.
    await mkdir(join(task, 'db'));
    await writeFile(join(task, 'db', 'Dockerfile'), 'FROM gym/busybox:latest\nCMD ["httpd", "-f"]\n');
    await compose(
      '    depends_on:\n      db:\n        condition: service_healthy\n  db:\n    build: ./db\n    healthcheck:\n      test: ["CMD", "true"]\n      interval: 1s\n',
    );
    const [withDb] = await readRows(task);
    expect(withDb?.services).toEqual([
      expect.objectContaining({
        name: 'db',
        build: true,
        build_context: join(task, 'db'),
        image: expect.stringMatching(/^gym\/harbor-tb-kind-\w+-db:[0-9a-f]{12}$/),
        healthcheck: expect.objectContaining({ argv: ['true'], intervalMs: 1000 }),
      }),
    ]);
    await rm(task, { recursive: true, force: true });
  });

  it('builds nothing from a JSONL row whose build_context or dockerfile is outside its task folder', async () => {
    // A downloaded rows file names its task folder (checked to be beside it); the fields that say
    // what is built must not reach another host folder (COPY would put its files in the image).
    const { buildHarborImages } = await import('./images.ts');
    const built: string[] = [];
    const client = {
      inspectImage: async () => null,
      prepareImage: async () => ({ images: [] }),
      buildImagePlan: async (request: { reference: string }) => {
        built.push(request.reference);
      },
    };
    const task = await mkdtemp(join(tmpdir(), 'harbor-outside-'));
    const rows: Array<Record<string, unknown>> = [
      {
        id: 'steal',
        task_dir: task,
        image: 'gym/harbor-steal:1',
        build: true,
        build_context: '/root/.ssh',
        dockerfile: join(task, 'Dockerfile'),
      },
      { id: 'steal-2', task_dir: task, image: 'gym/harbor-steal:2', build: true, dockerfile: '/etc/passwd' },
    ];
    await buildHarborImages(client as never, rows, (await import('../../../core/logger.ts')).silentLogger);
    expect(built).toEqual([]);
    expect(rows.map((row) => row.refused)).toEqual([
      expect.stringMatching(/build_context is not inside its task folder/),
      expect.stringMatching(/dockerfile is not inside its task folder/),
    ]);
    await rm(task, { recursive: true, force: true });
  });
});
