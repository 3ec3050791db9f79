#!/usr/bin/env bash
# Builds the test control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# kubectl, kwok) from Go modules at pinned versions and caches the binaries under
# $SCALEBOT_CACHE_DIR/control-plane/<key>/ (default: .cache/ in the repository).
#
# Prints the path of the cache directory on its last line of stdout.
# A warm cache is reused only when STAMP exists and every binary reports its pinned version.
set -euo pipefail

K8S_VERSION=1.36.3
ETCD_VERSION=3.6.16
KWOK_VERSION=0.8.0
CAPI_VERSION=1.14.2

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
cache_root=${SCALEBOT_CACHE_DIR:-$repo/.cache}/control-plane

export GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0

die() { echo "build-control-plane: $*" >&2; exit 1; }
log() { echo "build-control-plane: $*" >&2; }

command -v go >/dev/null || die "the Go toolchain is missing: install Go >= 1.26 (go.dev/doc/install or your distribution's golang package) and re-run"
go_version=$(go env GOVERSION)
case "$go_version" in
  go1.2[6-9]*|go1.[3-9][0-9]*) ;;
  *) die "Go $go_version is too old: Kubernetes v$K8S_VERSION and kwok v$KWOK_VERSION need Go >= 1.26" ;;
esac
command -v openssl >/dev/null || log "note: openssl not found (not needed for the build)"

script_hash=$(sha256sum "$0" | cut -c1-12)
key="k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}_capi-${CAPI_VERSION}_${go_version}_${script_hash}"
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
  [ -s "$d/kwok.yaml" ] && [ -d "$d/capi-crds" ] || return 1
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

# --- Kubernetes: a throw-away wrapper module replacing every staging module with its published
# v0.x.y, because k8s.io/kubernetes requires them at v0.0.0 (only its own replaces make that work).
k8s_mod="$stage/k8s-module"
mkdir -p "$k8s_mod"
(
  cd "$k8s_mod"
  printf 'module scalebot.test/k8sbin\n\ngo 1.26.0\n' > go.mod
  upstream=$(go mod download -json "k8s.io/kubernetes@v${K8S_VERSION}" \
             | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
  gd=$(grep -oE 'default=go[0-9.]+' "$upstream" | head -n1 || true)
  [ -z "$gd" ] || go mod edit -godebug="$gd"
  n=0
  for m in $(sed -nE 's#^[[:space:]]*(k8s\.io/[A-Za-z0-9._-]+) => \./staging/.*#\1#p' "$upstream" | sort -u); do
    go mod edit -replace="${m}=${m}@v0.${K8S_VERSION#1.}"; n=$((n + 1))
  done
  [ "$n" -ge 30 ] || die "only $n staging replaces found in $upstream"
  go mod edit -require="k8s.io/kubernetes@v${K8S_VERSION}"
)
(cd "$k8s_mod" && timed k8s-modules go get -tool k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kubectl)
# One go build for all four: shared packages compile once.
(cd "$k8s_mod" && timed k8s-build go build -trimpath -ldflags "$(stamp_flags "$K8S_VERSION")" \
    -o "$stage/bin/" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl)

# --- etcd: server/go.mod replaces its siblings with relative paths, so it needs a wrapper too.
etcd_mod="$stage/etcd-module"
mkdir -p "$etcd_mod"
(
  cd "$etcd_mod"
  printf 'module scalebot.test/etcdbin\n\ngo 1.26.0\n' > go.mod
  timed etcd-modules go get -tool "go.etcd.io/etcd/server/v3@v${ETCD_VERSION}"
  timed etcd-build go build -trimpath -ldflags "-s -w" -o "$stage/bin/etcd" go.etcd.io/etcd/server/v3
)

# --- kwok has no replace directives: the documented install works as is.
GOBIN="$stage/bin" timed kwok-build go install "sigs.k8s.io/kwok/cmd/kwok@v${KWOK_VERSION}"

# --- kwok stages, taken from the pinned module, plus our own pod-delete stage (see below).
kwok_dir=$(go mod download -json "sigs.k8s.io/kwok@v${KWOK_VERSION}" \
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
capi_dir=$(go mod download -json "sigs.k8s.io/cluster-api@v${CAPI_VERSION}" \
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

rm -rf "$k8s_mod" "$etcd_mod"
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
