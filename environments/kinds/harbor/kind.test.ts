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
