#!/usr/bin/env bash
# The test cluster's node: containerd and the kubelet, run by up.sh inside a mount namespace of
# their own (unshare --mount), so the kubelet's and containerd's mounts never reach the machine's.
#
# Why the bind mounts: the kubelet sets vm.overcommit_memory=1, kernel.panic=10 and
# kernel.panic_on_oops=1 when they differ (or, with protectKernelDefaults, refuses to start).
# On a machine others share, a test cluster must not change how the kernel answers an oops, so
# in this namespace those three files read as the kubelet wants; the kernel's values are untouched.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/lib.sh"
gymkube="$(k8s_bin_dir)/gymkube"

mount --make-rprivate /
sysctls="$K8S_STATE/sysctl"
mkdir -p "$sysctls"
for entry in vm/overcommit_memory=1 kernel/panic=10 kernel/panic_on_oops=1; do
  name="${entry%%=*}"
  echo "${entry#*=}" >"$sysctls/${name//\//.}"
  mount --bind -o ro "$sysctls/${name//\//.}" "/proc/sys/$name"
done

# Images come from images.sh only: every registry request goes to a proxy nobody serves on
# loopback and fails at once (a Pod of a missing image then ends ErrImagePull, as on any cluster).
HTTPS_PROXY=http://127.0.0.1:9 HTTP_PROXY=http://127.0.0.1:9 NO_PROXY= \
  containerd --config "$K8S_STATE/containerd.toml" >>"$K8S_STATE/logs/containerd.log" 2>&1 &
for _ in $(seq 1 100); do
  [ -S "$K8S_RUN/containerd.sock" ] && break
  sleep 0.1
done
"$here/images.sh" >>"$K8S_STATE/logs/images.log" 2>&1

"$gymkube" kubelet \
  --config="$K8S_STATE/kubelet.yaml" \
  --kubeconfig="$K8S_STATE/kubelet.kubeconfig" \
  --root-dir="$K8S_STATE/kubelet" \
  --hostname-override="$K8S_NODE_NAME" \
  --node-ip="$(k8s_node_ip)" \
  >>"$K8S_STATE/logs/kubelet.log" 2>&1 &
wait -n
