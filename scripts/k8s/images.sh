#!/usr/bin/env bash
# Puts images into the test cluster's containerd, from the local Docker engine (our own builder:
# `gym image build`, the test images) and never from a registry: `docker save | ctr import`.
# Without arguments it makes and imports the pause image (pause.c, static) that the Pods' sandbox
# containers run. Usage: images.sh [IMAGE...]   (the cluster must be up: scripts/k8s/up.sh)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/lib.sh"

ctr_k8s() { ctr --address "$K8S_RUN/containerd.sock" -n k8s.io "$@"; }
# One stream for all: the layers images share go once.
import() {
  local image
  for image in "$@"; do
    docker image inspect "$image" >/dev/null 2>&1 || { k8s_log "no image $image in the Docker engine"; return 1; }
  done
  docker save "$@" | ctr_k8s images import - >/dev/null
  k8s_log "imported $*"
}

if [ "$#" -eq 0 ]; then
  if ! docker image inspect "$K8S_PAUSE_IMAGE" >/dev/null 2>&1; then
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    cc -static -Os -o "$work/pause" "$here/pause.c"
    strip "$work/pause"
    tar -C "$work" -c pause | docker import -c 'ENTRYPOINT ["/pause"]' - "$K8S_PAUSE_IMAGE" >/dev/null
  fi
  set -- "$K8S_PAUSE_IMAGE"
fi
import "$@"
