#!/usr/bin/env bash
# Starts the one-node test cluster (Kubernetes as build.sh pins it) and prints the path of a
# kubeconfig for the provider: a real ServiceAccount `gym-sandboxd` in namespace gym-test holding
# only the Role docs/providers/kubernetes.md tells users to grant, its token from the TokenRequest
# API, TLS checked against the cluster's CA. Every component talks TLS with a client certificate;
# anonymous requests are refused. Idempotent: running components are kept.
#
#   scripts/k8s/up.sh             then  KUBECONFIG=$(scripts/k8s/up.sh) ...
#   scripts/k8s/images.sh IMAGE   to give the node an image of the local Docker engine
#   scripts/k8s/down.sh           stops it (--purge also removes its state)
#
# Needs root, containerd, runc and containernetworking-plugins (Debian's), openssl, Docker for images.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/lib.sh"
# Every connection of the cluster stays on this machine (the apiserver reaches the kubelet by the
# node's address, which a proxy of the environment would otherwise take).
unset HTTPS_PROXY HTTP_PROXY ALL_PROXY https_proxy http_proxy all_proxy

"$here/build.sh" >/dev/null
gymkube="$(k8s_bin_dir)/gymkube"
node_ip="$(k8s_node_ip)"
[ -n "$node_ip" ] || { k8s_log "no address for the node (the kubelet refuses loopback)"; exit 1; }
pki="$K8S_STATE/pki"
mkdir -p "$K8S_STATE/logs" "$K8S_STATE/pids" "$K8S_STATE/cni" "$K8S_RUN"
"$here/pki.sh" "$pki" "$node_ip"
api="https://127.0.0.1:$K8S_APISERVER_PORT"

# kubeconfig NAME USER-CERT (a client certificate's kubeconfig, for a component or the admin)
kubeconfig() {
  cat >"$K8S_STATE/$1.kubeconfig" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters: [{ name: gym, cluster: { server: "$api", certificate-authority: "$pki/ca.crt" } }]
users: [{ name: $1, user: { client-certificate: "$pki/$2.crt", client-key: "$pki/$2.key" } }]
contexts: [{ name: gym, context: { cluster: gym, user: $1 } }]
current-context: gym
KUBECONFIG
}
kubeconfig admin admin
kubeconfig controller-manager controller-manager
kubeconfig scheduler scheduler
kubeconfig kubelet kubelet-client
kubeconfig netpol netpol
kubectl() { "$gymkube" kubectl --kubeconfig "$K8S_STATE/admin.kubeconfig" "$@"; }

cat >"$K8S_STATE/containerd.toml" <<TOML
version = 2
root = "$K8S_STATE/containerd"
state = "$K8S_RUN/containerd"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "$K8S_RUN/containerd.sock"
[ttrpc]
  address = "$K8S_RUN/containerd.sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$K8S_STATE/containerd-opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$K8S_PAUSE_IMAGE"
  # Root here lacks CAP_SYS_RESOURCE: a Guaranteed Pod's oom_score_adj (-997) could not be set
  # and its containers would not start. Restricted, no container goes below containerd's own.
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$K8S_STATE/cni"
TOML

# Pods get an interface on a bridge with no address on the host and no route out: they reach
# each other on the node and nothing else. NetworkPolicy is enforced by gymnetpol (below).
cat >"$K8S_STATE/cni/10-gym.conflist" <<JSON
{
  "cniVersion": "0.4.0",
  "name": "gym-k8s",
  "plugins": [
    {
      "type": "bridge", "bridge": "$K8S_BRIDGE", "isGateway": false, "ipMasq": false,
      "ipam": { "type": "host-local", "ranges": [[{ "subnet": "$K8S_POD_SUBNET" }]], "dataDir": "$K8S_STATE/cni-ipam" }
    },
    { "type": "loopback" }
  ]
}
JSON
: >"$K8S_STATE/resolv.conf"

cat >"$K8S_STATE/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: "$node_ip"
port: $K8S_KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $K8S_KUBELET_HEALTHZ_PORT
tlsCertFile: "$pki/kubelet-server.crt"
tlsPrivateKeyFile: "$pki/kubelet-server.key"
authentication:
  anonymous: { enabled: false }
  webhook: { enabled: true }
  x509: { clientCAFile: "$pki/ca.crt" }
authorization: { mode: Webhook }
containerRuntimeEndpoint: "unix://$K8S_RUN/containerd.sock"
# The host mounts cgroup v1 controllers (and a v2 tree beside them): the kubelet sees v1 and
# drives it with cgroupfs, as Docker here does.
cgroupDriver: cgroupfs
# Root here lacks CAP_SYS_RESOURCE, so the kubelet cannot lower its own oom_score_adj (-999).
oomScoreAdj: 0
failSwapOn: false
resolvConf: "$K8S_STATE/resolv.conf"
podLogsDir: "$K8S_STATE/pod-logs"
serializeImagePulls: false
# Images come from images.sh, never from a registry: the kubelet must not collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: { memory.available: "100Mi", nodefs.available: "2%", imagefs.available: "2%", nodefs.inodesFree: "2%" }
YAML

# start NAME COMMAND...: a component in a session of its own, once.
start() {
  local name="$1" pidfile="$K8S_STATE/pids/$1"
  shift
  if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then return 0; fi
  setsid "$@" >>"$K8S_STATE/logs/$name.log" 2>&1 </dev/null &
  echo $! >"$pidfile"
}
# wait_for WHAT SECONDS COMMAND...
wait_for() {
  local what="$1" seconds="$2"
  shift 2
  for _ in $(seq 1 $((seconds * 2))); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  k8s_log "$what did not come up in ${seconds} s: see $K8S_STATE/logs"
  return 1
}

start etcd "$gymkube" etcd --name gym --data-dir "$K8S_STATE/etcd" \
  --listen-client-urls "https://127.0.0.1:$K8S_ETCD_PORT" --advertise-client-urls "https://127.0.0.1:$K8S_ETCD_PORT" \
  --listen-peer-urls "https://127.0.0.1:$K8S_ETCD_PEER_PORT" --initial-advertise-peer-urls "https://127.0.0.1:$K8S_ETCD_PEER_PORT" \
  --initial-cluster "gym=https://127.0.0.1:$K8S_ETCD_PEER_PORT" \
  --client-cert-auth --trusted-ca-file "$pki/ca.crt" --cert-file "$pki/etcd-server.crt" --key-file "$pki/etcd-server.key" \
  --peer-client-cert-auth --peer-trusted-ca-file "$pki/ca.crt" --peer-cert-file "$pki/etcd-server.crt" --peer-key-file "$pki/etcd-server.key" \
  --unsafe-no-fsync --log-level warn
start kube-apiserver "$gymkube" kube-apiserver \
  --bind-address 127.0.0.1 --secure-port "$K8S_APISERVER_PORT" --advertise-address 127.0.0.1 --endpoint-reconciler-type none \
  --etcd-servers "https://127.0.0.1:$K8S_ETCD_PORT" --etcd-cafile "$pki/ca.crt" \
  --etcd-certfile "$pki/etcd-client.crt" --etcd-keyfile "$pki/etcd-client.key" \
  --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" --client-ca-file "$pki/ca.crt" \
  --kubelet-client-certificate "$pki/apiserver-kubelet-client.crt" --kubelet-client-key "$pki/apiserver-kubelet-client.key" \
  --kubelet-certificate-authority "$pki/ca.crt" --kubelet-preferred-address-types InternalIP \
  --service-account-issuer https://kubernetes.default.svc --service-account-key-file "$pki/sa.pub" \
  --service-account-signing-key-file "$pki/sa.key" --service-cluster-ip-range 10.96.0.0/24 \
  --authorization-mode Node,RBAC --anonymous-auth=false --enable-admission-plugins NodeRestriction \
  --allow-privileged=false --profiling=false
wait_for kube-apiserver 120 kubectl get --raw /readyz
start kube-controller-manager "$gymkube" kube-controller-manager \
  --kubeconfig "$K8S_STATE/controller-manager.kubeconfig" --secure-port 0 --leader-elect=false \
  --use-service-account-credentials --service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt"
start kube-scheduler "$gymkube" kube-scheduler \
  --kubeconfig "$K8S_STATE/scheduler.kubeconfig" --secure-port 0 --leader-elect=false
start node unshare --mount --propagation private "$here/node.sh"
# The kubelet's own health first: a node object left from an earlier run still reads Ready.
wait_for "the kubelet" 180 curl -sf "http://127.0.0.1:$K8S_KUBELET_HEALTHZ_PORT/healthz"
wait_for "the node $K8S_NODE_NAME" 180 \
  sh -c "'$gymkube' kubectl --kubeconfig '$K8S_STATE/admin.kubeconfig' get node '$K8S_NODE_NAME' -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True"

# NetworkPolicy: kube-router's policy controller (gymnetpol) turns the policies into iptables rules
# and ipsets on this machine for the Pods' addresses. It sees bridged traffic only through
# br_netfilter with net.bridge.bridge-nf-call-iptables=1 (Docker sets both); without them no
# policy would hold, so up.sh refuses to start a cluster that would claim one.
[ "$(cat /proc/sys/net/bridge/bridge-nf-call-iptables 2>/dev/null)" = 1 ] || {
  k8s_log "net.bridge.bridge-nf-call-iptables is not 1 (modprobe br_netfilter): NetworkPolicy could not be enforced"
  exit 1
}
command -v ipset >/dev/null 2>&1 || { k8s_log "ipset is not installed (Debian's ipset): gymnetpol needs it"; exit 1; }
kubectl apply -f - >/dev/null <<YAML
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: { name: gym-netpol }
rules:
  - { apiGroups: [""], resources: [pods, namespaces, nodes], verbs: [get, list, watch] }
  - { apiGroups: [networking.k8s.io], resources: [networkpolicies], verbs: [get, list, watch] }
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: { name: gym-netpol }
roleRef: { apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: gym-netpol }
subjects: [{ apiGroup: rbac.authorization.k8s.io, kind: User, name: gym-netpol }]
YAML
# Rules a controller killed without down.sh left would satisfy the wait below before this one
# synced: a new controller starts from none.
if ! { [ -f "$K8S_STATE/pids/netpol" ] && kill -0 "$(cat "$K8S_STATE/pids/netpol")" 2>/dev/null; }; then
  "$(k8s_bin_dir)/gymnetpol" cleanup >>"$K8S_STATE/logs/netpol.log" 2>&1
fi
start netpol "$(k8s_bin_dir)/gymnetpol" run --kubeconfig "$K8S_STATE/netpol.kubeconfig" \
  --node "$K8S_NODE_NAME" --service-cidr 10.96.0.0/24 -v 1
# Its chains exist once it has synced: before that a Pod's traffic would pass unchecked.
wait_for "the policy controller" 60 iptables -S KUBE-ROUTER-FORWARD

# The daemon's identity: exactly the Role the docs ask users to grant, nothing more.
kubectl apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Namespace
# Pod Security admission (on by default) holds the namespace to the baseline profile, as many
# clusters do: a Pod of the provider that asked for more would be refused here.
metadata: { name: $K8S_NAMESPACE, labels: { pod-security.kubernetes.io/enforce: baseline } }
---
apiVersion: v1
kind: ServiceAccount
metadata: { name: gym-sandboxd, namespace: $K8S_NAMESPACE }
---
$(sed -n '/^apiVersion: rbac.authorization.k8s.io\/v1$/,/^```$/p' "$here/../../docs/providers/kubernetes.md" | sed '/^```$/d' | sed "s/namespace: gym }/namespace: $K8S_NAMESPACE }/g")
YAML
token="$(kubectl create token gym-sandboxd -n "$K8S_NAMESPACE" --duration 48h)"
umask 077
cat >"$K8S_STATE/gym.kubeconfig" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters: [{ name: gym, cluster: { server: "$api", certificate-authority-data: "$(base64 -w0 "$pki/ca.crt")" } }]
users: [{ name: gym-sandboxd, user: { token: "$token" } }]
contexts: [{ name: gym, context: { cluster: gym, user: gym-sandboxd, namespace: $K8S_NAMESPACE } }]
current-context: gym
KUBECONFIG
k8s_log "Kubernetes $K8S_VERSION is up at $api (node $K8S_NODE_NAME, $node_ip)"
echo "$K8S_STATE/gym.kubeconfig"
