/**
 * The row a Harbor or Terminal-Bench task folder becomes: what both readers
 * (`task-directory.ts`, `terminal-bench.ts`) produce and the `harbor` kind runs.
 */
import type { ComposeServiceRow } from './compose.ts';
import type { DeclaredNetwork } from './network.ts';

/** A Harbor task as a row of the `harbor` kind. */
export interface HarborRow {
  [key: string]: unknown;
  id: string;
  instruction: string;
  /** Absolute path of the task directory. */
  task_dir: string;
  /** The image the agent's sandbox runs: built from environment/Dockerfile, or task.toml's docker_image. */
  image: string;
  /** Whether `image` is built from environment/Dockerfile (else it must exist already). */
  build: boolean;
  /** The working directory of the image (its last WORKDIR), where the agent and test.sh start. */
  workdir: string;
  verifier_timeout_sec: number;
  agent_timeout_sec?: number;
  build_timeout_sec: number;
  /** task.toml's [environment] env (the sandbox's), [verifier] env and [solution] env, `${VAR}` unresolved. */
  environment_env: Record<string, string>;
  verifier_env: Record<string, string>;
  solution_env: Record<string, string>;
  verifier_user?: string;
  cpus?: number;
  memory_mb?: number;
  /** `terminal-bench` for a Terminal-Bench task folder (task.yaml; terminal-bench.ts), else Harbor's. */
  format?: 'terminal-bench';
  /** The build context and Dockerfile when they are not environment/ and environment/Dockerfile. */
  build_context?: string;
  dockerfile?: string;
  /** Whether `workdir` is task.toml's [environment] workdir (which wins over the image's WORKDIR). */
  workdir_from_task?: boolean;
  /** A separate verifier's sandbox (separate-verifier.ts): its image, working directory, env and resources. */
  verifier_environment?: {
    image: string;
    build: boolean;
    workdir: string;
    env: Record<string, string>;
    cpus?: number;
    memory_mb?: number;
    build_timeout_sec: number;
  };
  /** task.toml's `artifacts`: copied from the agent's sandbox into a separate verifier's. */
  artifacts?: string[];
  /**
   * The Compose file's other services (compose.ts), run beside the agent's sandbox in its network
   * namespace; each built image's `workdir` is filled in when it is built.
   */
  services?: ComposeServiceRow[];
  /**
   * task.toml's `[environment.healthcheck]`: a shell command run in the agent's sandbox with
   * Docker's HEALTHCHECK semantics before the agent starts (seconds, as Harbor writes them).
   */
  healthcheck?: {
    command: string;
    interval_sec: number;
    timeout_sec: number;
    start_period_sec: number;
    start_interval_sec: number;
    retries: number;
  };
  /** task.toml's `[[environment.mcp_servers]]`, as Harbor gives them to its agents. */
  mcp_servers?: Array<Record<string, unknown>>;
  /** What task.toml declares for the network of the agent's run and of the tests (network.ts). */
  declared_network: DeclaredNetwork;
  /**
   * Why the task cannot run here (a feature we do not support, a build that failed): the run
   * writes it as the task's failure line and goes on with the others.
   */
  refused?: string;
}
