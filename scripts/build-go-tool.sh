#!/usr/bin/env bash
# Builds a Go tool the tests use, from its Go module at the version pinned in
# localcluster/<tool>/versions.env, from the committed wrapper module there (go.mod, go.sum) with
# -mod=readonly, and caches the binary under $SCALEBOT_CACHE_DIR/<tool>/<key>/ (default: .cache/).
# No downloaded binaries: every module is verified against the committed go.sum.
#
#   scripts/build-go-tool.sh helm     # helm.sh/helm/v3's CLI (the chart's tests)
#   scripts/build-go-tool.sh promql   # Prometheus' PromQL engine (the alert and dashboard tests):
#                                     # localcluster/promql/eval_test.go compiled with `go test -c`
#
# Prints the path of the binary on its last line of stdout.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
tool=${1:?usage: build-go-tool.sh helm|promql}
lock_dir="$repo/localcluster/$tool"
cache_root=${SCALEBOT_CACHE_DIR:-$repo/.cache}/$tool
export GOTOOLCHAIN=local GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0

die() { echo "build-go-tool: $*" >&2; exit 1; }
log() { echo "build-go-tool: $*" >&2; }

[ -f "$lock_dir/versions.env" ] || die "unknown tool '$tool' (no localcluster/$tool/versions.env)"
# shellcheck disable=SC1091
source "$lock_dir/versions.env"
case $tool in
  helm) module=helm.sh/helm/v3 version=$HELM_VERSION ;;
  promql) module=github.com/prometheus/prometheus version=$PROMETHEUS_VERSION ;;
  *) die "unknown tool '$tool'" ;;
esac
command -v go >/dev/null || die "the Go toolchain is missing: install Go >= 1.26 and re-run"
grep -qE "^[[:space:]]*(require[[:space:]]+)?${module//./\\.} v${version//./\\.}( |$)" "$lock_dir/go.mod" \
  || die "localcluster/$tool/go.mod does not require $module v$version (versions.env pins it)"

go_version=$(go env GOVERSION)
shopt -s nullglob
sources=("$lock_dir"/*.go)  # the promql evaluator's own code; none for helm
lock_hash=$(cat "$0" "$lock_dir"/versions.env "$lock_dir"/go.mod "$lock_dir"/go.sum "${sources[@]}" \
            | sha256sum | cut -c1-12)
dest="$cache_root/$tool-${version}_${go_version}_${lock_hash}"

verify() {  # verify DIR: the binary is there and runs
  case $tool in
    helm) [ -x "$1/helm" ] && "$1/helm" version --template '{{.Version}}' 2>/dev/null | grep -qx "v$version" ;;
    promql) [ -x "$1/promql" ] && "$1/promql" -test.run '^$' >/dev/null 2>&1 ;;
  esac
}

if verify "$dest"; then
  log "$tool: cached ($dest)"; echo "$dest/$tool"; exit 0
fi
mkdir -p "$cache_root"
exec 9>"$cache_root/.lock"
flock 9
if verify "$dest"; then
  log "$tool: cached ($dest)"; echo "$dest/$tool"; exit 0
fi
stage=$(mktemp -d "$cache_root/.build-XXXXXX")
trap 'rm -rf "$stage"' EXIT
started=$(date +%s)
case $tool in
  helm)
    (cd "$lock_dir" && go build -trimpath \
        -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=v${version}" \
        -o "$stage/helm" helm.sh/helm/v3/cmd/helm) ;;
  promql)
    (cd "$lock_dir" && go test -c -trimpath -ldflags "-s -w" -o "$stage/promql" .) ;;
esac
verify "$stage" || die "the built $tool does not run or does not report v$version"
echo "total $(( $(date +%s) - started ))" > "$stage/build-times.txt"
rm -rf "$dest"; mv "$stage" "$dest"; trap - EXIT
find "$cache_root" -mindepth 1 -maxdepth 1 -type d -name "$tool-*" ! -path "$dest" -exec rm -rf {} +
log "$tool v$version built in $(cut -d' ' -f2 "$dest/build-times.txt") s"
echo "$dest/$tool"
