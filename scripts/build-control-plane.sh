#!/usr/bin/env bash
# Builds the test control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# kubectl, kwok, Karpenter's kwok cloud provider) from Go modules at pinned versions and caches the binaries under
# $SCALEBOT_CACHE_DIR/control-plane/<key>/ (default: .cache/ in the repository).
#
# Prints the path of the cache directory on its last line of stdout.
# A warm cache is reused only when STAMP exists and every binary reports its pinned version.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
lock_dir="$repo/localcluster/go"
cache_root=${SCALEBOT_CACHE_DIR:-$repo/.cache}/control-plane
# shellcheck source=../localcluster/go/versions.env
source "$lock_dir/versions.env"

# -mod=readonly whatever the caller's GOFLAGS say: the committed go.sum files are the only source of
# truth for what gets built.
export GOTOOLCHAIN=local GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0

die() { echo "build-control-plane: $*" >&2; exit 1; }
log() { echo "build-control-plane: $*" >&2; }

command -v go >/dev/null || die "the Go toolchain is missing: install Go >= 1.26 (go.dev/doc/install or your distribution's golang package) and re-run"
go_version=$(go env GOVERSION)
case "$go_version" in
  go1.2[6-9]*|go1.[3-9][0-9]*) ;;
  *) die "Go $go_version is too old: Kubernetes v$K8S_VERSION and kwok v$KWOK_VERSION need Go >= 1.26" ;;
esac

# The lock must say what the pins say: one clear line instead of a build of something else.
check_lock() {  # check_lock WRAPPER MODULE VERSION
  local want="$2 v$3"
  [ -f "$lock_dir/$1/go.mod" ] && [ -f "$lock_dir/$1/go.sum" ] \
    || die "localcluster/go/$1/go.mod or go.sum is missing: run scripts/bump-control-plane.sh"
  grep -qE "^[[:space:]]*(require[[:space:]]+)?${2//./\\.} v${3//./\\.}( |$)" "$lock_dir/$1/go.mod" \
    || die "localcluster/go/$1/go.mod does not require $want (versions.env pins it): run scripts/bump-control-plane.sh and commit localcluster/go/"
}
check_lock k8s k8s.io/kubernetes "$K8S_VERSION"
check_lock etcd go.etcd.io/etcd/server/v3 "$ETCD_VERSION"
check_lock kwok sigs.k8s.io/kwok "$KWOK_VERSION"
check_lock capi sigs.k8s.io/cluster-api "$CAPI_VERSION"
check_lock karpenter sigs.k8s.io/karpenter "$KARPENTER_VERSION"

lock_hash=$(cat "$0" "$lock_dir"/versions.env "$lock_dir"/*/go.mod "$lock_dir"/*/go.sum "$here/kwok-pod-delete-stage.yaml" \
            | sha256sum | cut -c1-12)
key="k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}_capi-${CAPI_VERSION}_karpenter-${KARPENTER_VERSION}_${go_version}_${lock_hash}"
dest="$cache_root/$key"

# reports PATTERN CMD...: CMD succeeds and a line of its output matches PATTERN (grep -x when
# PATTERN starts with "line:"). The output is captured first: piping it into `grep -q`, which exits
# at the first match, can kill the command with SIGPIPE, and under pipefail that failed the check at
# random (about one call in twenty), which made a warm cache look broken and rebuilt it.
reports() {
  local pattern=$1 out; shift
  out=$("$@" 2>/dev/null) || return 1
  case $pattern in
    line:*) grep -qxF -- "${pattern#line:}" <<<"$out" ;;
    *) grep -qF -- "$pattern" <<<"$out" ;;
  esac
}

verify() {  # verify DIR: every binary present and reporting its pinned version
  local d=$1
  [ -f "$d/STAMP" ] || return 1
  reports "line:Kubernetes v${K8S_VERSION}" "$d/bin/kube-apiserver" --version || return 1
  reports "line:Kubernetes v${K8S_VERSION}" "$d/bin/kube-controller-manager" --version || return 1
  reports "line:Kubernetes v${K8S_VERSION}" "$d/bin/kube-scheduler" --version || return 1
  reports "Client Version: v${K8S_VERSION}" "$d/bin/kubectl" version --client || return 1
  reports "etcd Version: ${ETCD_VERSION}" "$d/bin/etcd" --version || return 1
  reports "kwok version v${KWOK_VERSION} " "$d/bin/kwok" --version || return 1
  # Karpenter's binary has no --version flag; its embedded build information names the module.
  reports "sigs.k8s.io/karpenter"$'\t'"v${KARPENTER_VERSION}" go version -m "$d/bin/karpenter-kwok" || return 1
  [ -s "$d/kwok.yaml" ] && [ -d "$d/capi-crds" ] && [ -s "$d/karpenter-crds/karpenter.sh_nodepools.yaml" ] || return 1
}

if verify "$dest"; then
  log "control-plane: cached ($dest)"
  echo "$dest"; exit 0
fi

mkdir -p "$cache_root"
exec 9>"$cache_root/.lock"
log "waiting for the build lock ($cache_root/.lock)"
flock 9
if verify "$dest"; then  # another run finished the build while we waited
  log "control-plane: cached ($dest)"
  echo "$dest"; exit 0
fi

stage=$(mktemp -d "$cache_root/.build-XXXXXX")
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/times"
started=$(date +%s)

timed() {  # timed PHASE CMD...: run CMD under GNU time, append "phase wall-s maxrss-kb"
  local phase=$1; shift
  local t0; t0=$(date +%s)
  log "phase $phase: $*"
  if [ -x /usr/bin/time ]; then
    /usr/bin/time -v -o "$stage/times/$phase.txt" "$@"
    local rss; rss=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$stage/times/$phase.txt")
    echo "$phase $(( $(date +%s) - t0 )) ${rss:-?}" >> "$stage/build-times.txt"
  else
    "$@"
    echo "$phase $(( $(date +%s) - t0 )) ?" >> "$stage/build-times.txt"
  fi
}

stamp_flags() {  # ldflags that make --version truthful (the keys hack/lib/version.sh sets)
  local ver=$1 minor=${1#1.}; minor=${minor%%.*}
  local out="-s -w" pkg kv
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    for kv in "gitVersion=v${ver}" gitMajor=1 "gitMinor=${minor}" gitTreeState=clean \
              "buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"; do
      out+=" -X ${pkg}.${kv}"
    done
  done
  printf '%s' "$out"
}

# --- Kubernetes, etcd, kwok: built from the committed wrapper modules. -mod=readonly means every
# module is verified against the committed go.sum and nothing is ever resolved: a module missing from
# the lock or a changed checksum fails the build. The wrappers exist because k8s.io/kubernetes and
# etcd's server replace their sibling modules with relative paths (see scripts/bump-control-plane.sh).
(cd "$lock_dir/k8s" && timed k8s-build go build -trimpath -ldflags "$(stamp_flags "$K8S_VERSION")" \
    -o "$stage/bin/" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl)
(cd "$lock_dir/etcd" && timed etcd-build go build -trimpath -ldflags "-s -w" -o "$stage/bin/etcd" \
    go.etcd.io/etcd/server/v3)
(cd "$lock_dir/kwok" && timed kwok-build go build -trimpath -ldflags "-s -w" \
    -o "$stage/bin/kwok" sigs.k8s.io/kwok/cmd/kwok)

# Karpenter's kwok cloud provider runs the real provisioning, disruption and termination controllers;
# its "cloud" creates Node objects. Its main package is also called kwok: the binary gets its own name.
(cd "$lock_dir/karpenter" && timed karpenter-build go build -trimpath -ldflags "-s -w" \
    -o "$stage/bin/karpenter-kwok" sigs.k8s.io/karpenter/kwok)

# --- kwok stages, taken from the pinned module, plus our own pod-delete stage (see below).
kwok_dir=$(cd "$lock_dir/kwok" && go mod download -json "sigs.k8s.io/kwok" \
           | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
{
  for f in node/fast/node-initialize.yaml \
           node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
           pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml; do
    [ -f "$kwok_dir/kustomize/stage/$f" ] || die "kwok stage $f is missing from $kwok_dir"
    echo "---"; cat "$kwok_dir/kustomize/stage/$f"
  done
  echo "---"; cat "$here/kwok-pod-delete-stage.yaml"
} > "$stage/kwok.yaml"

# --- Cluster API CRDs for the Cluster API provider's e2e tests (read from the module, never committed).
capi_dir=$(cd "$lock_dir/capi" && go mod download -json "sigs.k8s.io/cluster-api" \
           | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
mkdir -p "$stage/capi-crds"
# Since v1.10 the core CRDs live under core/; older releases kept them at the module root.
crd_dir="$capi_dir/core/config/crd/bases"
[ -d "$crd_dir" ] || crd_dir="$capi_dir/config/crd/bases"
for crd in clusters machines machinesets machinedeployments; do
  src="$crd_dir/cluster.x-k8s.io_${crd}.yaml"
  [ -f "$src" ] || die "Cluster API CRD $src is missing"
  cp "$src" "$stage/capi-crds/"
done
chmod -R u+w "$stage/capi-crds"

# --- Karpenter CRDs for the Karpenter provider's e2e tests (read from the module, never committed):
# NodePool, NodeClaim and the others the controller watches, plus the kwok provider's KWOKNodeClass.
# That one lives under kwok/apis/crds/: the chart directory only links to it, and module zips drop
# links (without it every NodePool stays NodeClassReady=Unknown and nothing is provisioned).
karpenter_dir=$(cd "$lock_dir/karpenter" && go mod download -json "sigs.k8s.io/karpenter" \
                | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
mkdir -p "$stage/karpenter-crds"
for src in "$karpenter_dir"/kwok/charts/crds/*.yaml "$karpenter_dir"/kwok/apis/crds/karpenter.kwok.sh_kwoknodeclasses.yaml; do
  [ -f "$src" ] || die "Karpenter CRD $src is missing"
  cp "$src" "$stage/karpenter-crds/"
done
[ -f "$stage/karpenter-crds/karpenter.sh_nodepools.yaml" ] || die "the NodePool CRD is missing from $karpenter_dir/kwok/charts/crds"
chmod -R u+w "$stage/karpenter-crds"

total=$(( $(date +%s) - started ))
{
  echo "total $total"
  echo "gomodcache $(du -sh "$(go env GOMODCACHE)" 2>/dev/null | cut -f1)"
  echo "gocache $(du -sh "$(go env GOCACHE)" 2>/dev/null | cut -f1)"
} >> "$stage/build-times.txt"
echo "$key" > "$stage/STAMP"
verify "$stage" || die "built binaries do not report the pinned versions (see $stage)"
rm -rf "$dest"
mv "$stage" "$dest"
trap - EXIT
# Older keys (another pin or an edited script) are dead weight of several hundred MB each.
find "$cache_root" -mindepth 1 -maxdepth 1 -type d -name 'k8s-*' ! -name "$key" -exec rm -rf {} +
peak=$(awk '$3 ~ /^[0-9]+$/ && $3 > m {m=$3} END {printf "%.1f", m/1048576}' "$dest/build-times.txt")
log "control-plane build: ${total} s (peak RSS ${peak} GiB; phases in $dest/build-times.txt)"
echo "$dest"
