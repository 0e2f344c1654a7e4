#!/usr/bin/env bash
# Builds the one-node test cluster's binary, gymkube (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubelet and kubectl as subcommands of one Go main: scripts/k8s/gymkube), once per
# machine, into ~/.cache/gym/k8s/<kubernetes version>/bin. The Kubernetes version is the one
# gymkube/go.mod pins; its modules come through the Go module proxy, checked against gymkube/go.sum.
# Nothing of Kubernetes is kept in this repository. Idempotent: a cache with the binary is kept.
#
#   scripts/k8s/build.sh            build if missing, print the binary's path
#   GYM_K8S_CACHE=/dir              another cache root (default ~/.cache/gym/k8s)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/lib.sh"

out="$(k8s_bin_dir)/gymkube"
if [ -x "$out" ] && "$out" kubectl version --client >/dev/null 2>&1; then
  echo "$out"
  exit 0
fi
command -v go >/dev/null 2>&1 || PATH="/usr/local/go/bin:$PATH"
command -v go >/dev/null 2>&1 || { k8s_log "go is not installed (Go >= 1.24 builds Kubernetes $K8S_VERSION)"; exit 1; }
mkdir -p "$(k8s_bin_dir)"
version_flags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  version_flags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=${K8S_MINOR%%.*} -X $pkg.gitMinor=${K8S_MINOR#*.}"
  version_flags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
k8s_log "building gymkube for Kubernetes $K8S_VERSION with $(go version | cut -d' ' -f3) (a long compile: niced)"
started=$SECONDS
# -mod=readonly: go.sum pins every module; a build that would change it fails instead.
(cd "$here/gymkube" && CGO_ENABLED=0 GOFLAGS=-mod=readonly nice -n 19 \
  go build -trimpath -ldflags "-s -w$version_flags" -o "$out.partial" .)
mv "$out.partial" "$out"
k8s_log "built $out in $((SECONDS - started)) s"
echo "$out"
