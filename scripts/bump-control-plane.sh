#!/usr/bin/env bash
# Regenerates the locked Go modules of the test control plane (localcluster/go/*/go.mod, go.sum and
# upstream.mod) from the pins in localcluster/go/versions.env. Run it only to change a pin:
#
#   scripts/bump-control-plane.sh [--k8s 1.36.4] [--etcd 3.6.17] [--kwok 0.8.1] [--capi 1.14.3] [--karpenter 1.15.0]
#
# then commit localcluster/go/. The everyday build (scripts/build-control-plane.sh) never resolves
# anything: it builds these modules with -mod=readonly, so every module is verified against the
# committed go.sum. Every version asked for here is explicit (module@vX.Y.Z), never "latest".
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
lock_dir=$(cd "$here/../localcluster/go" && pwd)
versions="$lock_dir/versions.env"

die() { echo "bump-control-plane: $*" >&2; exit 1; }
log() { echo "bump-control-plane: $*" >&2; }

set_pin() {  # set_pin NAME VALUE: rewrite NAME=... in versions.env
  [[ $2 =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "$1: '$2' is not a release version (X.Y.Z)"
  sed -i -E "s/^$1=.*/$1=$2/" "$versions"
}
while [ $# -gt 0 ]; do
  case $1 in
    --k8s) set_pin K8S_VERSION "${2:?}"; shift 2 ;;
    --etcd) set_pin ETCD_VERSION "${2:?}"; shift 2 ;;
    --kwok) set_pin KWOK_VERSION "${2:?}"; shift 2 ;;
    --capi) set_pin CAPI_VERSION "${2:?}"; shift 2 ;;
    --karpenter) set_pin KARPENTER_VERSION "${2:?}"; shift 2 ;;
    *) die "unknown argument $1 (expected --k8s/--etcd/--kwok/--capi/--karpenter VERSION)" ;;
  esac
done
# shellcheck source=../localcluster/go/versions.env
source "$versions"

# -mod=mod only here, where resolving is the point; the build itself uses -mod=readonly.
export GOTOOLCHAIN=local GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0

# new_module DIR MODULE: an empty wrapper module (go directive as the build script expects).
new_module() {
  rm -rf "$1"; mkdir -p "$1"
  printf 'module %s\n\ngo 1.26.0\n' "$2" > "$1/go.mod"
}

# keep_upstream DIR MODULE@VERSION: copy the pinned module's own go.mod beside the wrapper, so the
# lock test can check (offline, against the go.sum hash) that every version in the wrapper is one
# the pinned module itself asks for.
keep_upstream() {
  local gomod
  gomod=$(go mod download -json "$2" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
  cp "$gomod" "$1/upstream.mod"; chmod u+w "$1/upstream.mod"
}

# --- Kubernetes: k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them with
# ./staging; a wrapper must replace each one with its published v0.<minor>.<patch>.
k8s="$lock_dir/k8s"
new_module "$k8s" scalebot.test/k8sbin
(
  cd "$k8s"
  keep_upstream "$k8s" "k8s.io/kubernetes@v${K8S_VERSION}"
  gd=$(grep -oE 'default=go[0-9.]+' upstream.mod | head -n1 || true)
  [ -z "$gd" ] || go mod edit -godebug="$gd"
  n=0
  for m in $(sed -nE 's#^[[:space:]]*(k8s\.io/[A-Za-z0-9._-]+) => \./staging/.*#\1#p' upstream.mod | sort -u); do
    go mod edit -replace="${m}=${m}@v0.${K8S_VERSION#1.}"; n=$((n + 1))
  done
  [ "$n" -ge 30 ] || die "only $n staging replaces found in k8s.io/kubernetes@v${K8S_VERSION}'s go.mod"
  v="@v${K8S_VERSION}"
  go get -tool "k8s.io/kubernetes/cmd/kube-apiserver$v" "k8s.io/kubernetes/cmd/kube-controller-manager$v" \
    "k8s.io/kubernetes/cmd/kube-scheduler$v" "k8s.io/kubernetes/cmd/kubectl$v"
)

# --- etcd: server/v3's go.mod replaces its siblings with relative paths, so it needs a wrapper too.
etcd="$lock_dir/etcd"
new_module "$etcd" scalebot.test/etcdbin
(
  cd "$etcd"
  keep_upstream "$etcd" "go.etcd.io/etcd/server/v3@v${ETCD_VERSION}"
  go get -tool "go.etcd.io/etcd/server/v3@v${ETCD_VERSION}"
)

# --- kwok: the binary, and the module's stage definitions (read by the build).
kwok="$lock_dir/kwok"
new_module "$kwok" scalebot.test/kwokbin
(
  cd "$kwok"
  keep_upstream "$kwok" "sigs.k8s.io/kwok@v${KWOK_VERSION}"
  go get -tool "sigs.k8s.io/kwok/cmd/kwok@v${KWOK_VERSION}"
)

# --- Cluster API: only its CRD files are used, so the wrapper requires the module and locks the
# hash of its source tree (the h1: line of the zip, which `go get` alone does not record).
capi="$lock_dir/capi"
new_module "$capi" scalebot.test/capicrds
(
  cd "$capi"
  keep_upstream "$capi" "sigs.k8s.io/cluster-api@v${CAPI_VERSION}"
  go mod edit -require="sigs.k8s.io/cluster-api@v${CAPI_VERSION}"
  sum=$(go mod download -json "sigs.k8s.io/cluster-api@v${CAPI_VERSION}" \
        | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["Sum"], d["GoModSum"])')
  read -r zip_sum mod_sum <<<"$sum"
  printf 'sigs.k8s.io/cluster-api v%s %s\nsigs.k8s.io/cluster-api v%s/go.mod %s\n' \
    "$CAPI_VERSION" "$zip_sum" "$CAPI_VERSION" "$mod_sum" > go.sum
)

# --- Karpenter: the kwok cloud provider (the real Karpenter controllers, whose "cloud" creates Node
# objects), and the module's CRDs (read by the build). Its go.mod has no replace directives; the
# go directive of the pinned release must not exceed the local toolchain (GOTOOLCHAIN=local).
karpenter="$lock_dir/karpenter"
new_module "$karpenter" scalebot.test/karpenterbin
(
  cd "$karpenter"
  keep_upstream "$karpenter" "sigs.k8s.io/karpenter@v${KARPENTER_VERSION}"
  go get -tool "sigs.k8s.io/karpenter/kwok@v${KARPENTER_VERSION}"
)

log "locked modules regenerated in $lock_dir for k8s $K8S_VERSION, etcd $ETCD_VERSION, kwok $KWOK_VERSION, capi $CAPI_VERSION, karpenter $KARPENTER_VERSION"
log "next: scripts/build-control-plane.sh (checks the lock and builds), then commit localcluster/go/"
