# Shared by scripts/k8s/*.sh: the pinned version and where things live. Sourced, not run.
K8S_VERSION="v$(sed -n 's/^\tk8s.io\/kubernetes v\([0-9.]*\)$/\1/p' "$(dirname "${BASH_SOURCE[0]}")/gymkube/go.mod")"
K8S_MINOR="$(echo "${K8S_VERSION#v}" | cut -d. -f1,2)"
K8S_CACHE="${GYM_K8S_CACHE:-$HOME/.cache/gym/k8s}"
# The cluster's state (certificates, etcd, containerd's images, the kubelet's root): kept across
# down/up so images stay imported; `down.sh --purge` removes it.
K8S_STATE="${GYM_K8S_STATE:-$K8S_CACHE/$K8S_VERSION/state}"
K8S_RUN=/run/gym-k8s
K8S_PAUSE_IMAGE=gym.local/k8s-pause:1
# Ports away from the components' defaults, so a cluster of the machine's own is not in the way.
K8S_ETCD_PORT=22379
K8S_ETCD_PEER_PORT=22380
K8S_APISERVER_PORT=26443
K8S_KUBELET_PORT=20250
K8S_KUBELET_HEALTHZ_PORT=20248
K8S_NODE_NAME=gym-node
K8S_POD_SUBNET=10.244.0.0/24
K8S_BRIDGE=gymk8s0
K8S_NAMESPACE="${GYM_K8S_NAMESPACE:-gym-test}"
k8s_bin_dir() { echo "$K8S_CACHE/$K8S_VERSION/bin"; }
k8s_log() { printf '[k8s] %s\n' "$*" >&2; }
# The address the kubelet serves on and the apiserver reaches it at: the kubelet refuses loopback.
k8s_node_ip() { ip -4 route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p'; }
