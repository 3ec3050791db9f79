#!/usr/bin/env bash
# Builds the Helm CLI (helm.sh/helm/v3/cmd/helm) from its Go module at the version pinned in
# localcluster/helm/versions.env, from the committed wrapper module (go.mod, go.sum) with
# -mod=readonly, and caches the binary under $SCALEBOT_CACHE_DIR/helm/<key>/ (default: .cache/).
# No downloaded binaries: every module is verified against the committed go.sum.
#
# Prints the path of the binary on its last line of stdout.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
lock_dir="$repo/localcluster/helm"
cache_root=${SCALEBOT_CACHE_DIR:-$repo/.cache}/helm
# shellcheck source=../localcluster/helm/versions.env
source "$lock_dir/versions.env"
export GOTOOLCHAIN=local GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0

die() { echo "build-helm: $*" >&2; exit 1; }
log() { echo "build-helm: $*" >&2; }

command -v go >/dev/null || die "the Go toolchain is missing: install Go >= 1.26 and re-run"
grep -qE "^[[:space:]]*(require[[:space:]]+)?helm\.sh/helm/v3 v${HELM_VERSION//./\\.}( |$)" "$lock_dir/go.mod" \
  || die "localcluster/helm/go.mod does not require helm.sh/helm/v3 v$HELM_VERSION (versions.env pins it)"

go_version=$(go env GOVERSION)
lock_hash=$(cat "$0" "$lock_dir/versions.env" "$lock_dir/go.mod" "$lock_dir/go.sum" | sha256sum | cut -c1-12)
dest="$cache_root/helm-${HELM_VERSION}_${go_version}_${lock_hash}"

verify() { [ -x "$1/helm" ] && "$1/helm" version --template '{{.Version}}' 2>/dev/null | grep -qx "v$HELM_VERSION"; }

if verify "$dest"; then
  log "cached ($dest)"; echo "$dest/helm"; exit 0
fi
mkdir -p "$cache_root"
exec 9>"$cache_root/.lock"
flock 9
if verify "$dest"; then
  log "cached ($dest)"; echo "$dest/helm"; exit 0
fi
stage=$(mktemp -d "$cache_root/.build-XXXXXX")
trap 'rm -rf "$stage"' EXIT
started=$(date +%s)
(cd "$lock_dir" && go build -trimpath \
    -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=v${HELM_VERSION}" \
    -o "$stage/helm" helm.sh/helm/v3/cmd/helm)
verify "$stage" || die "the built helm does not report v$HELM_VERSION"
echo "total $(( $(date +%s) - started ))" > "$stage/build-times.txt"
rm -rf "$dest"; mv "$stage" "$dest"; trap - EXIT
find "$cache_root" -mindepth 1 -maxdepth 1 -type d -name 'helm-*' ! -path "$dest" -exec rm -rf {} +
log "helm v$HELM_VERSION built in $(cat "$dest/build-times.txt" | cut -d' ' -f2) s"
echo "$dest/helm"
