#!/usr/bin/env bash
# Builds the one-node test cluster's binaries once per machine, into
# ~/.cache/gym/k8s/<kubernetes version>/bin:
#  - gymkube (scripts/k8s/gymkube): etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
#    kubelet and kubectl as subcommands of one Go main; the Kubernetes version is the one its
#    go.mod pins.
#  - gymnetpol (scripts/k8s/netpol): kube-router's network-policy controller alone, which enforces
#    NetworkPolicy on the node.
# Their modules come through the Go module proxy, checked against each main's go.sum. Nothing of
# Kubernetes or kube-router is kept in this repository. Idempotent: a binary in the cache is kept.
#
#   scripts/k8s/build.sh            build what is missing, print gymkube's path
#   GYM_K8S_CACHE=/dir              another cache root (default ~/.cache/gym/k8s)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/lib.sh"

command -v go >/dev/null 2>&1 || PATH="/usr/local/go/bin:$PATH"
# build NAME SOURCE-DIR CHECK-ARGS LDFLAGS [EXPECTED]: once; a binary that answers CHECK-ARGS (with
# output containing EXPECTED, when given) is kept.
build() {
  local name="$1" source="$2" check="$3" ldflags="$4" expected="${5:-}" out answer
  out="$(k8s_bin_dir)/$1"
  # shellcheck disable=SC2086 # CHECK-ARGS are words
  if [ -x "$out" ] && answer="$("$out" $check 2>/dev/null)" && [[ "$answer" == *"$expected"* ]]; then return 0; fi
  command -v go >/dev/null 2>&1 || { k8s_log "go is not installed (Go >= 1.24 builds Kubernetes $K8S_VERSION)"; exit 1; }
  mkdir -p "$(k8s_bin_dir)"
  k8s_log "building $name for Kubernetes $K8S_VERSION with $(go version | cut -d' ' -f3) (niced)"
  local started=$SECONDS
  # -mod=readonly: go.sum pins every module; a build that would change it fails instead.
  (cd "$source" && CGO_ENABLED=0 GOFLAGS=-mod=readonly nice -n 19 \
    go build -trimpath -ldflags "-s -w$ldflags" -o "$out.partial" .)
  mv "$out.partial" "$out"
  k8s_log "built $out in $((SECONDS - started)) s"
}

version_flags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  version_flags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=${K8S_MINOR%%.*} -X $pkg.gitMinor=${K8S_MINOR#*.}"
  version_flags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
build gymkube "$here/gymkube" "kubectl version --client" "$version_flags"
# The kube-router version go.mod pins, which the binary reports: another pin builds it again.
kube_router="$(sed -n 's/^\tgithub.com\/cloudnativelabs\/kube-router\/v2 \(v[0-9.]*\)$/\1/p' "$here/netpol/go.mod")"
build gymnetpol "$here/netpol" "version" " -X main.kubeRouterVersion=$kube_router" "kube-router $kube_router "
echo "$(k8s_bin_dir)/gymkube"
