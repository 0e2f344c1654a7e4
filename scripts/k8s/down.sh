#!/usr/bin/env bash
# Stops the test cluster up.sh started: its Pods' processes (found by the cgroups the kubelet made,
# /kubepods), the node (containerd, its shims and the kubelet, found by their mount namespace),
# then the control plane by the ids up.sh recorded, and the Pods' bridge. Touches no process of
# its own kind it did not start. `--purge` also removes the state (certificates, etcd, images).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/lib.sh"
pids="$K8S_STATE/pids"

alive() { [ -f "$pids/$1" ] && kill -0 "$(cat "$pids/$1")" 2>/dev/null; }
# The Pods' processes, then the node's own (every process in the node's mount namespace).
# (v1 here: /sys/fs/cgroup/pids/kubepods; a cgroup v2 host has one tree, /sys/fs/cgroup/kubepods)
for kubepods in /sys/fs/cgroup/pids/kubepods /sys/fs/cgroup/kubepods; do
  [ -f "$kubepods/cgroup.procs" ] || continue
  find "$kubepods" -name cgroup.procs -exec cat {} + 2>/dev/null | xargs -r kill -9 2>/dev/null || true
done
if alive node; then
  node_ns="$(readlink "/proc/$(cat "$pids/node")/ns/mnt")"
  for proc in /proc/[0-9]*; do
    [ "$(readlink "$proc/ns/mnt" 2>/dev/null)" = "$node_ns" ] && kill -9 "${proc#/proc/}" 2>/dev/null || true
  done
fi
for name in netpol kube-scheduler kube-controller-manager kube-apiserver etcd; do
  if alive "$name"; then
    kill "$(cat "$pids/$name")"
    for _ in $(seq 1 50); do alive "$name" || break; sleep 0.1; done
    alive "$name" && kill -9 "$(cat "$pids/$name")"
  fi
  rm -f "$pids/$name"
done
rm -f "$pids/node"
# The kubelet's cgroups, deepest first, in every v1 hierarchy.
for kubepods in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
  [ -d "$kubepods" ] && find "$kubepods" -depth -type d -exec rmdir {} \; 2>/dev/null || true
done
# The policy controller's iptables chains and ipsets (all named KUBE-*); nothing else of the machine's.
[ -x "$(k8s_bin_dir)/gymnetpol" ] && "$(k8s_bin_dir)/gymnetpol" cleanup >>"$K8S_STATE/logs/netpol.log" 2>&1 || true
ip link show "$K8S_BRIDGE" >/dev/null 2>&1 && ip link delete "$K8S_BRIDGE"
rm -rf "$K8S_RUN"
if [ "${1:-}" = "--purge" ]; then
  rm -rf "$K8S_STATE"
fi
k8s_log "the test cluster is down"
