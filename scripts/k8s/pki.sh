#!/usr/bin/env bash
# The test cluster's certificates (scripts/k8s/up.sh runs this): one CA for every component, a
# serving certificate per server (etcd, kube-apiserver, kubelet) naming the addresses it is reached
# at, a client certificate per component (the identities RBAC and the Node authorizer expect), and
# the service-account signing key. Idempotent: an existing file is kept. Usage: pki.sh DIR NODE_IP
set -euo pipefail
dir="$1"
node_ip="$2"
mkdir -p "$dir"
cd "$dir"
umask 077

key() { [ -f "$1.key" ] || openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1.key" 2>/dev/null; }
if [ ! -f ca.crt ]; then
  key ca
  openssl req -x509 -new -key ca.key -days 3650 -subj "/CN=gym-k8s-ca" -out ca.crt \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
fi
# cert NAME SUBJECT USAGE [SAN]
cert() {
  local name="$1" subject="$2" usage="$3" san="${4:-}"
  [ -f "$name.crt" ] && return 0
  key "$name"
  local ext
  ext="$(mktemp)"
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature"
    echo "extendedKeyUsage=$usage"
    [ -n "$san" ] && echo "subjectAltName=$san"
  } >"$ext"
  openssl req -new -key "$name.key" -subj "$subject" 2>/dev/null |
    openssl x509 -req -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -extfile "$ext" -out "$name.crt" 2>/dev/null
  rm -f "$ext"
}
cert etcd-server "/CN=etcd" serverAuth,clientAuth "IP:127.0.0.1,DNS:localhost"
cert etcd-client "/CN=kube-apiserver-etcd-client" clientAuth
cert apiserver "/CN=kube-apiserver" serverAuth \
  "IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
cert admin "/O=system:masters/CN=gym-k8s-admin" clientAuth
cert controller-manager "/CN=system:kube-controller-manager" clientAuth
cert scheduler "/CN=system:kube-scheduler" clientAuth
cert kubelet-client "/O=system:nodes/CN=system:node:gym-node" clientAuth
cert netpol "/CN=gym-netpol" clientAuth
cert kubelet-server "/CN=gym-node" serverAuth "IP:$node_ip,DNS:gym-node"
[ -f sa.key ] || openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out sa.key 2>/dev/null
[ -f sa.pub ] || openssl pkey -in sa.key -pubout -out sa.pub
