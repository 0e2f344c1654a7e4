#!/usr/bin/env bash
# Brings a fresh machine of ours to the point where `npm test` and `bin/gym` work. Idempotent:
# every step checks first and does only what is missing, so running it again costs seconds.
#
#   1. Node >= 22 (installs Node 24 from the npm registry into .tools/node when the machine's is older)
#   2. Debian packages: docker.io, busybox-static, debootstrap, gcc + libc6-dev (for gym-exec),
#      python3-toolz (a real project's own tests, for the swebench kind's test),
#      python3-pytest (the Python package's tests, python/tests)
#      chromium (the results viewer's browser tests, cli/viewer)
#      slurm-wlm + munge (a one-node Slurm cluster), docker-registry (a loopback mirror for a test)
#      runsc (gVisor) and podman: the isolation tiers the Docker contract also runs under
#   2a. .tools/gym-exec, the static exec helper the Docker provider mounts into every sandbox
#   2c. the one-node Slurm cluster (scripts/slurm-up.sh)
#   2d. uv (pinned) for the machine's python3: the Python package's install test
#   2e. gym-hpc, a user that is not root, for the HPC tests that log in as one
#   3. a Docker engine (dockerd --bridge=none --iptables=false --experimental, when none answers), with gVisor's
#      runsc registered as a runtime in /etc/docker/daemon.json (3a)
#   3b. a Podman service on /run/podman/gym-podman.sock for the Podman tier's tests
#   3c. the cgroup2 mount remounted with favordynmods when the kernel takes it (best effort)
#   4. npm ci
#   5. the local base images (gym image build: busybox, debian-base)
#   6. the agents from PyPI (gym agent install: mini-swe-agent, openhands), each a Python 3.13
#      runtime made from a Debian trixie root and its hash-pinned wheels (docs/harnesses.md)
#   7. the Python frameworks the integration tests run (scripts/framework-runtimes.ts), made the same way
#   8. the one-node Kubernetes cluster's binaries (scripts/k8s/build.sh: gymkube and gymnetpol, from
#      the Go module proxy, once per machine into ~/.cache/gym/k8s), and br_netfilter for its
#      NetworkPolicy; .ci/run starts the cluster (scripts/k8s/up.sh) for the `*.cluster.int.test.ts` files
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
log() { printf '[setup] %s\n' "$*" >&2; }

# 1. Node
node_major() { node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0; }
local_node="$root/.tools/node/node_modules/node/bin"
if [ "$(node_major)" -lt 22 ]; then
  if [ ! -x "$local_node/node" ]; then
    log "Node $(node_major) is older than 22: installing Node 24 into .tools/node"
    mkdir -p .tools/node
    npm install --prefix .tools/node --no-save --no-audit --no-fund --loglevel=error node@24 >/dev/null
  fi
  export PATH="$local_node:$PATH"
fi
log "node $(node --version)"

# 2. Debian packages
missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
dpkg -s busybox-static >/dev/null 2>&1 || missing+=(busybox-static)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
command -v cc >/dev/null 2>&1 || missing+=(gcc)
dpkg -s libc6-dev >/dev/null 2>&1 || missing+=(libc6-dev)
# toolz with its own tests: the real project the swebench kind's integration test is made from.
dpkg -s python3-toolz >/dev/null 2>&1 || missing+=(python3-toolz)
# pytest for Debian's python3: the Python package's tests (python/tests) run under it.
dpkg -s python3-pytest >/dev/null 2>&1 || missing+=(python3-pytest)
# A headless browser drives the results viewer's page in its tests (cli/viewer/viewer.int.test.ts).
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
# The second, minimal provider of the tests (test/fixtures/bwrap-provider.ts) runs commands under it.
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
# Real SSH servers stand for compute nodes in the SSH transport tests (providers/ssh/).
command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ] || missing+=(openssh-server)
command -v ssh-keygen >/dev/null 2>&1 || missing+=(openssh-client)
# The enroot provider squashes root filesystems into .sqsh images; its stand-in unpacks them.
command -v mksquashfs >/dev/null 2>&1 || missing+=(squashfs-tools)
# A one-node Slurm cluster for the Slurm mode of the SSH providers (step 2c starts it).
command -v slurmctld >/dev/null 2>&1 || missing+=(slurm-wlm)
command -v munged >/dev/null 2>&1 || missing+=(munge)
# A registry mirror for the image-source test (providers/docker/image-sources.int.test.ts), which
# starts its own on loopback with a temporary storage directory.
[ -x /usr/bin/docker-registry ] || missing+=(docker-registry)
# The isolation tiers (docs/isolation-tiers.md): the Docker contract also runs under gVisor and on
# Podman's Docker-compatible service.
command -v runsc >/dev/null 2>&1 || missing+=(runsc)
command -v podman >/dev/null 2>&1 || missing+=(podman)
# The one-node Kubernetes cluster of the tests (scripts/k8s/): its node's container runtime and CNI
# plugins, and the ipsets its NetworkPolicy controller keeps.
command -v containerd >/dev/null 2>&1 || missing+=(containerd)
[ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
command -v ipset >/dev/null 2>&1 || missing+=(ipset)
if [ "${#missing[@]}" -gt 0 ]; then
  log "installing Debian packages: ${missing[*]}"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# 2a. The exec helper: without it the Docker provider falls back to a weaker timeout kill.
helper_source="providers/docker/exec-helper/gym-exec.c"
if [ ! -x .tools/gym-exec ] || [ "$helper_source" -nt .tools/gym-exec ]; then
  log "compiling .tools/gym-exec (static)"
  mkdir -p .tools
  cc -static -Os -Wall -o .tools/gym-exec.tmp "$helper_source" && strip .tools/gym-exec.tmp
  mv .tools/gym-exec.tmp .tools/gym-exec
fi

# 2b. The relay the Kubernetes, Apptainer and Enroot providers copy into their sandboxes for gateway reach (without it, none).
relay_source="providers/shared/relay-helper/gym-relay.c"
if [ ! -x .tools/gym-relay ] || [ "$relay_source" -nt .tools/gym-relay ]; then
  log "compiling .tools/gym-relay (static)"
  mkdir -p .tools
  cc -static -Os -Wall -o .tools/gym-relay.tmp "$relay_source" && strip .tools/gym-relay.tmp
  mv .tools/gym-relay.tmp .tools/gym-relay
fi

# 2c. The one-node Slurm cluster (munged, slurmctld, slurmd; node gym-c1 at 127.0.0.20)
bash scripts/slurm-up.sh

# 2d. uv, pinned, beside the machine's python3: the Python package's install test
# (test/python-install.int.test.ts) installs it with uv as with pip, offline.
uv_version=0.13.9
if [ "$(python3 -m uv --version 2>/dev/null | cut -d' ' -f2)" != "$uv_version" ]; then
  log "installing uv $uv_version for python3"
  # Hash-pinned (the x86_64 manylinux wheel, the only one this machine takes).
  printf 'uv==%s --hash=sha256:d7f459fe4fd247d830351c75686d3996ace3c6f3f728eb0e85a30b7ada0cef19\n' "$uv_version" >"${TMPDIR:-/tmp}/gym-uv-requirement.txt"
  python3 -m pip install --quiet --disable-pip-version-check --require-hashes -r "${TMPDIR:-/tmp}/gym-uv-requirement.txt"
fi

# 2e. A user that is not root, for the HPC tests that log in as one (the usual case on a
# cluster): no password (the tests' sshd takes a key), no sudo, bash as its shell.
# '*': no password, yet not locked (sshd without PAM refuses a locked account even a key).
id gym-hpc >/dev/null 2>&1 || useradd --create-home --shell /bin/bash --password '*' gym-hpc

# 3a. gVisor as a runtime of the engine. Only runtimes go in daemon.json: dockerd's other options
# are flags below, and one given both ways makes dockerd refuse to start. Runtimes reload on SIGHUP,
# so a running engine (and its containers) is never restarted for this. runsc works here only on
# its ptrace platform (kvm hung and wedged `docker rm -f`), with its own network stack off,
# and with shared file access (else the guest never sees what an archive upload wrote).
daemon_json=/etc/docker/daemon.json
if command -v runsc >/dev/null 2>&1; then
  wanted_runsc='{"path":"'"$(command -v runsc)"'","runtimeArgs":["--platform=ptrace","--network=none","--file-access=shared"]}'
  if ! node -e '
    const fs = require("node:fs");
    const [file, wanted] = process.argv.slice(1);
    let config = {};
    try { config = JSON.parse(fs.readFileSync(file, "utf8")); } catch (error) { if (error.code !== "ENOENT") throw error; }
    if (JSON.stringify(config.runtimes?.runsc) === wanted) process.exit(0);
    config.runtimes = { ...config.runtimes, runsc: JSON.parse(wanted) };
    fs.mkdirSync(require("node:path").dirname(file), { recursive: true });
    fs.writeFileSync(file, JSON.stringify(config, null, 2) + "\n");
    process.exit(1);
  ' "$daemon_json" "$wanted_runsc"; then
    log "registered runsc in $daemon_json"
    if pid="$(pgrep -xo dockerd)"; then kill -HUP "$pid"; sleep 1; fi
  fi
fi

# 3. Docker engine
engine_answers() { docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }
if ! engine_answers; then
  if pgrep -x dockerd >/dev/null 2>&1; then
    log "dockerd is running but not answering yet; waiting"
  else
    dockerd_log="${TMPDIR:-/tmp}/gym-dockerd.log"
    log "starting dockerd --bridge=none --iptables=false --experimental (log: $dockerd_log)"
    # No bridge and no iptables: containers get no network of their own (our default anyway),
    # and nothing in a test can reach an address beyond this machine. --experimental turns on
    # checkpoint and restore, which the Docker provider's live fork under gVisor needs
    # (docs/snapshots.md); nothing else of ours changes with it.
    nohup dockerd --bridge=none --iptables=false --experimental >"$dockerd_log" 2>&1 &
  fi
  for _ in $(seq 1 60); do engine_answers && break; sleep 0.5; done
  engine_answers || { log "the Docker engine did not come up; see ${TMPDIR:-/tmp}/gym-dockerd.log"; exit 1; }
fi
log "docker engine $(docker version --format '{{.Server.Version}}')"

# 3b. Podman's Docker-compatible service for the Podman tier's tests (its own store and socket;
# the Docker engine's socket is never touched).
podman_socket=/run/podman/gym-podman.sock
podman_answers() {
  node -e 'require("node:http").get({ socketPath: process.argv[1], path: "/_ping", timeout: 2000 }, (response) => process.exit(response.statusCode === 200 ? 0 : 1)).on("error", () => process.exit(1))' "$podman_socket"
}
if command -v podman >/dev/null 2>&1 && ! podman_answers; then
  mkdir -p "$(dirname "$podman_socket")"
  podman_log="${TMPDIR:-/tmp}/gym-podman.log"
  log "starting podman system service on $podman_socket (log: $podman_log)"
  nohup podman system service --time=0 "unix://$podman_socket" >"$podman_log" 2>&1 &
  for _ in $(seq 1 40); do podman_answers && break; sleep 0.5; done
  podman_answers || { log "the Podman service did not come up; see $podman_log"; exit 1; }
fi

# 3c. favordynmods on the cgroup2 mount (/sys/fs/cgroup on a v2 host, /sys/fs/cgroup/unified on a
# hybrid one): without it every write to cgroup.procs waits for an RCU grace period of the kernel,
# ~12 ms of each one-shot exec (it moves its command into a cgroup of its own; docs/benchmarks.md).
# Best effort: a kernel before 6.0, or no root, refuses it and set-up goes on; `gym doctor` warns.
# Only until the next boot (or the next mount of the hierarchy).
read -r cgroup2_mount cgroup2_options < <(awk '{ for (i = 7; i < NF; i++) if ($i == "-") { if ($(i + 1) == "cgroup2") { print $5, $(i + 3); exit } break } }' /proc/self/mountinfo) || true
if [ -n "${cgroup2_mount:-}" ]; then
  case ",$cgroup2_options," in
    *,favordynmods,*) log "cgroup2 at $cgroup2_mount has favordynmods" ;;
    *)
      if mount -o remount,favordynmods "$cgroup2_mount" 2>/dev/null; then
        log "remounted cgroup2 at $cgroup2_mount with favordynmods (one-shot exec no longer waits ~12 ms on its cgroup move)"
      else
        log "cgroup2 at $cgroup2_mount: the kernel refused favordynmods (Linux 6.0+ and root needed); one-shot exec pays ~12 ms more"
      fi
      ;;
  esac
fi

# 4. npm dependencies (npm ci only when the lock file changed since the last install)
if [ ! -f node_modules/.package-lock.json ] || ! cmp -s package-lock.json .tools/installed-package-lock.json 2>/dev/null; then
  log "npm ci"
  npm ci --no-audit --no-fund --loglevel=error >/dev/null
  mkdir -p .tools && cp package-lock.json .tools/installed-package-lock.json
fi

# 5. Images (each is rebuilt only when its recipe hash changes)
log "building local images (debian-base takes about a minute the first time)"
node cli/main.ts image build

# 6. Agents from PyPI (each made once; a runtime of the same pins is kept)
log "installing the agents from PyPI (a few minutes the first time)"
node cli/main.ts agent install

# 7. The frameworks our users run, for the integration tests (each made once, like the agents)
log "making the Python frameworks' runtimes (a few minutes the first time)"
node scripts/framework-runtimes.ts

# 8. The Kubernetes test cluster's binaries (a long compile the first time, niced; kept after).
# Its NetworkPolicy controller sees the Pods' bridged traffic only through br_netfilter with
# bridge-nf-call-iptables on (up.sh refuses to start without it; best effort here).
modprobe br_netfilter 2>/dev/null || true
sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null || true
log "building the Kubernetes test cluster's binaries (about 20 min of wall time on 2 busy cores the first time)"
k8s_started=$SECONDS
scripts/k8s/build.sh >/dev/null
log "the Kubernetes test cluster's binaries are ready ($(((SECONDS - k8s_started) / 60)) min)"
