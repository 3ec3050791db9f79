#!/usr/bin/env bash
# Builds scalebot's container image without a container engine: Debian bookworm packages
# (mmdebstrap) pinned by image/packages.txt and checked against image/debian.lock, scalebot's wheel
# and the Python packages locked in requirements/image.txt in /opt/scalebot (image/setup.sh, run in a
# chroot), packed as an OCI image (umoci) and exported as a docker-archive (skopeo). The image
# configuration (user, working directory, environment, ports, entrypoint, command, labels) is read
# from the Dockerfile's final stage, so the two images cannot drift apart.
#
#   scripts/build-image.sh          build (or reuse) the image; the last line of stdout is its directory
#   scripts/build-image.sh --lock   resolve image/packages.txt anew from the current Debian archive,
#                                   rewrite its versions and image/debian.lock, then build
#   scripts/build-image.sh --allow-debian-drift
#                                   for the test suite only: where the archive no longer has a locked
#                                   version, install its current version of that same package, say
#                                   which moved, and keep the image apart from the locked one (below)
#
# Output, cached by a hash of every input under $SCALEBOT_CACHE_DIR/image/<key>/ (default .cache/):
#   oci/                     OCI image layout, reference name <version> (e.g. oci/:0.1.0)
#   scalebot-<version>.tar   docker-archive tagged scalebot:<version> (docker load, kind load image-archive)
#   DIGEST                   the manifest digest; IMAGE-SIZE the compressed and unpacked sizes
#   debian.lock              the Debian packages actually installed (the lock's format)
#   DEBIAN-DRIFT             "name: locked -> used" per package that is not at its locked version
#                            (only with --allow-debian-drift; such a build goes to <key>_drift-<hash
#                            of what it installed>/, which a strict build never reuses)
#
# What is pinned: every Debian package by name, version and architecture (image/debian.lock; a
# Debian version never changes content, and apt checks each file against the archive's signed
# index); every Python distribution by version and sha256 (requirements/image.txt); file times by
# SOURCE_DATE_EPOCH (from the lock). What is not: the archive itself. A Debian mirror keeps only the
# newest version of each package, so after a bookworm point release or security update the locked
# versions disappear from it and this script stops, listing them (scripts/debian_lock.py pins every
# locked version with apt preferences, after checking the archive still has it); then either
# re-lock (--lock, review, commit) or build the locked versions from Debian's snapshot archive by
# pointing SCALEBOT_DEBIAN_SOURCES at a sources file for the lock's snapshot timestamp.
#
# Needs root (mmdebstrap's root mode, chroot) on Debian or Ubuntu; installs mmdebstrap, umoci and
# skopeo with apt-get when they are missing. Python 3.11 on x86_64 Linux (the image's own platform)
# downloads the wheels.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
cache_root=${SCALEBOT_CACHE_DIR:-$repo/.cache}/image
packages="$repo/image/packages.txt"
lock="$repo/image/debian.lock"

die() { echo "build-image: $*" >&2; exit 1; }
log() { echo "build-image: $*" >&2; }

relock=false
drift=false
case "${1:-}" in
  --lock) relock=true ;;
  --allow-debian-drift) drift=true ;;
  "") ;;
  *) die "unknown argument $1 (usage: scripts/build-image.sh [--lock | --allow-debian-drift])" ;;
esac

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$repo/pyproject.toml" | head -n1)
[ -n "$version" ] || die "no version in pyproject.toml"

# The inputs: this script, the image definition, the locks, and what goes into the wheel (the
# Docker build context's allow-list). Changing any of them builds a new image.
image_key() {
  local files
  files=$(cd "$repo" && {
    printf '%s\n' scripts/build-image.sh scripts/debian_lock.py scripts/debian-pin-hook.sh \
      Dockerfile pyproject.toml README.md requirements/image.txt
    find image -type f
    find engine bot localcluster -type f \( -name '*.py' -o -name '*.yaml' -o -name '*.typed' \)
  } | LC_ALL=C sort)
  echo "scalebot-${version}_$(cd "$repo" && while read -r f; do printf '%s\0' "$f"; cat "$f"; done <<<"$files" \
                             | sha256sum | cut -c1-16)"
}
key=$(image_key)
dest="$cache_root/$key"

verify() {  # verify DIR: a complete build
  local d=$1
  [ -f "$d/STAMP" ] && [ -f "$d/oci/index.json" ] && [ -s "$d/scalebot-$version.tar" ] && [ -s "$d/DIGEST" ]
}

report() {
  if [ -s "$1/DEBIAN-DRIFT" ]; then
    log "Debian packages not at their image/debian.lock version (the archive moved on; re-lock:" \
        "sudo scripts/build-image.sh --lock, review and commit image/):"
    sed 's/^/  /' "$1/DEBIAN-DRIFT" >&2
  fi
  echo "scalebot:$version $(cat "$1/DIGEST") ($(cat "$1/IMAGE-SIZE"))" >&2
  echo "$1"
}
cached() {  # the build of these inputs this mode may reuse (a drifted one only with --allow-debian-drift)
  local d
  if verify "$dest"; then echo "$dest"; return; fi
  $drift || return 0
  for d in $(ls -dt "$dest"_drift-* 2>/dev/null); do
    if verify "$d"; then echo "$d"; return; fi
  done
}

if ! $relock && [ -n "$(cached)" ]; then
  dest=$(cached)
  log "cached ($dest)"
  touch "$dest"  # in use: see the pruning at the end
  report "$dest"; exit 0
fi

[ "$(id -u)" = 0 ] || die "needs root (mmdebstrap's root mode and chroot); run it with sudo"
[ "$(uname -m)" = x86_64 ] || die "builds the amd64 image only; this machine is $(uname -m)"

mkdir -p "$cache_root"
exec 9>"$cache_root/.lock"
log "waiting for the build lock ($cache_root/.lock)"
flock 9
if ! $relock && [ -n "$(cached)" ]; then
  dest=$(cached)
  log "cached ($dest)"
  report "$dest"; exit 0
fi

# --- build tools: Debian packages, installed like any other dependency of the build.
missing=()
for tool in mmdebstrap:mmdebstrap umoci:umoci skopeo:skopeo; do
  command -v "${tool%%:*}" >/dev/null || missing+=("${tool#*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
  command -v apt-get >/dev/null || die "missing ${missing[*]} and no apt-get to install them"
  log "installing ${missing[*]} (apt-get)"
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
fi

python=${PYTHON:-python3.11}
command -v "$python" >/dev/null || python=python3
"$python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
  || die "needs Python 3.11 to download the image's wheels (found $("$python" --version 2>&1)); set PYTHON"

stage=$(mktemp -d "$cache_root/.build-XXXXXX")
chmod 755 "$stage"
mounts_under() {  # mount points below $1, deepest first
  awk -v s="$1/" 'index($2, s) == 1 {print $2}' /proc/self/mounts | sort -r
}
cleanup() {
  # Whatever is still mounted in the stage (ours below, or mmdebstrap's after an interruption) is
  # detached first, so deleting the stage never reaches through a mount into the host.
  local m
  while read -r m; do [ -z "$m" ] || umount -l "$m" || true; done <<<"$(mounts_under "$stage")"
  if [ -n "$(mounts_under "$stage")" ]; then
    log "mounts remain under $stage; leaving it in place"
    return
  fi
  rm -rf "$stage"
}
trap cleanup EXIT
started=$(date +%s)
timed() {  # timed PHASE CMD...: CMD's status (set -e does not apply where timed is followed by ||)
  local phase=$1 t0 status=0; t0=$(date +%s); shift
  "$@" || status=$?
  echo "$phase $(( $(date +%s) - t0 ))" >> "$stage/build-times.txt"
  return "$status"
}

# --- SOURCE_DATE_EPOCH: fixed by the lock, so file times and the image's creation date are the
# lock's, whenever and wherever the image is built.
if $relock; then
  SOURCE_DATE_EPOCH=$(date +%s)
else
  [ -f "$lock" ] || die "image/debian.lock is missing: run scripts/build-image.sh --lock"
  SOURCE_DATE_EPOCH=$(sed -n 's/^# source-date-epoch: \([0-9]*\)$/\1/p' "$lock")
  [ -n "$SOURCE_DATE_EPOCH" ] || die "image/debian.lock has no '# source-date-epoch:' line"
fi
export SOURCE_DATE_EPOCH

# --- Python: the scalebot wheel, built from exactly the files the Docker build context allows,
# and the locked wheels (sha256-checked by pip; kept in a shared download directory).
wheels="$stage/wheels"
mkdir -p "$wheels" "$stage/src" "$cache_root/downloads"
(cd "$repo" && tar --exclude=__pycache__ --exclude='*.pyc' -cf - pyproject.toml README.md engine bot localcluster) \
  | tar -xf - -C "$stage/src"
pip=("$python" -m pip --disable-pip-version-check --no-input --quiet)
timed wheels "${pip[@]}" download --require-hashes --no-deps --only-binary=:all: \
  -r "$repo/requirements/image.txt" -d "$cache_root/downloads" >&2
# Copy exactly the locked files (a name per requirement) out of the shared download directory.
"$python" - "$repo/requirements/image.txt" "$cache_root/downloads" "$wheels" <<'PY'
import hashlib, pathlib, re, shutil, sys
lock, downloads, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3])
text = lock.read_text().replace("\\\n", " ")
allowed = set(re.findall(r"--hash=sha256:([0-9a-f]{64})", text))
wanted = len(re.findall(r"^[A-Za-z0-9][A-Za-z0-9._-]*==", text, re.M))
found = [p for p in downloads.iterdir() if hashlib.sha256(p.read_bytes()).hexdigest() in allowed]
if len(found) != wanted:
    sys.exit(f"build-image: {len(found)} locked wheels in {downloads}, expected {wanted}")
for p in found:
    shutil.copy2(p, out / p.name)
PY
cp "$repo/requirements/image.txt" "$wheels/image.txt"
# The build backend comes from requirements/test.txt (scripts/dev-env.sh), hence no isolation.
timed scalebot-wheel "${pip[@]}" wheel --no-deps --no-build-isolation -w "$wheels" "$stage/src" >&2

# --- Debian: Essential plus image/packages.txt at their pinned versions.
debian_sources=()
if [ -n "${SCALEBOT_DEBIAN_SOURCES:-}" ]; then
  debian_sources=("$SCALEBOT_DEBIAN_SOURCES")
elif [ -f /etc/apt/sources.list.d/debian.sources ] && grep -qw bookworm /etc/apt/sources.list.d/debian.sources; then
  debian_sources=(/etc/apt/sources.list.d/debian.sources)  # this machine's own bookworm mirror
fi                                                           # else mmdebstrap's defaults for bookworm
# The names only: the versions are the lock's, every one of the image's packages (Essential's too)
# held by apt preferences that the setup hook writes after checking the archive still has them.
wanted=$(grep -v '^[[:space:]]*\(#\|$\)' "$packages" | sed 's/=.*//')
include=$(paste -sd, <<<"$wanted")
pin_hook=()
: > "$stage/unpinned.txt"
if ! $relock; then
  pin_hook=(--setup-hook="sh '$here/debian-pin-hook.sh' \"\$1\" '$python' '$lock' '$stage' $($drift && echo --allow-drift || true)")
fi
# Debian's own "slim" trims: no manual pages, documentation (copyright files stay) or translations.
# The merged-usr hook lays out /usr as debootstrap and Debian's images do; without it apt satisfies
# init-system-helpers with the usrmerge package, which drags Perl into the image.
timed debian mmdebstrap --quiet --mode=root --variant=essential --architectures=amd64 --include="$include" \
  "${pin_hook[@]}" \
  --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/lintian/*' \
  bookworm "$stage/rootfs" "${debian_sources[@]}" >&2 \
  || die "mmdebstrap failed (above)"

installed=$(dpkg-query --admindir="$stage/rootfs/var/lib/dpkg" -W -f='${Package} ${Version} ${Architecture}\n' \
            | LC_ALL=C sort)
if $relock; then
  {
    echo "# Every Debian package in scalebot's image: name, version, architecture. Generated by"
    echo "# scripts/build-image.sh --lock from image/packages.txt; the build refuses any other set."
    echo "# locked-at: $(date -u -d "@$SOURCE_DATE_EPOCH" +%Y%m%dT%H%M%SZ) (a snapshot archive timestamp that has these versions)"
    echo "# source-date-epoch: $SOURCE_DATE_EPOCH"
    echo "$installed"
  } > "$lock"
  # Pin the asked-for packages in packages.txt to what was resolved.
  while read -r name ver _; do
    sed -i "s/^${name//./\\.}=.*/${name}=${ver}/; s/^${name//./\\.}\$/${name}=${ver}/" "$packages"
  done <<<"$installed"
  log "image/debian.lock and image/packages.txt rewritten; review and commit them"
  key=$(image_key)  # the lock is an input
  dest="$cache_root/$key"
else
  # The same packages (name and architecture) always; other versions only where the archive no
  # longer had the locked one and --allow-debian-drift let it move.
  echo "$installed" > "$stage/installed.txt"
  "$python" "$here/debian_lock.py" check "$lock" "$stage/installed.txt" "$stage/unpinned.txt" "$stage/DEBIAN-DRIFT" \
    || die "the Debian packages differ from image/debian.lock (above)"
  if [ -s "$stage/DEBIAN-DRIFT" ]; then
    dest="$cache_root/${key}_drift-$(sha256sum <<<"$installed" | cut -c1-12)"
  else
    rm "$stage/DEBIAN-DRIFT"
  fi
fi
{
  grep '^#' "$lock" 2>/dev/null || true
  echo "$installed"
} > "$stage/debian.lock"

# --- scalebot: image/setup.sh in the new root filesystem, the wheels bind-mounted at /wheels.
rootfs="$stage/rootfs"
mkdir -p "$rootfs/wheels"
cp "$repo/image/setup.sh" "$wheels/setup.sh"
mount --bind "$wheels" "$rootfs/wheels"
mount -t proc proc "$rootfs/proc"
timed setup env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C.UTF-8 SOURCE_DATE_EPOCH="$SOURCE_DATE_EPOCH" \
  chroot "$rootfs" /bin/sh /wheels/setup.sh >&2
umount "$rootfs/proc"
umount "$rootfs/wheels"
rmdir "$rootfs/wheels"

# What a build leaves that is not part of the image, or differs from one build to the next.
rm -rf "$rootfs"/etc/apt "$rootfs"/var/lib/apt "$rootfs"/var/cache/apt "$rootfs"/var/log/apt \
       "$rootfs"/var/cache/ldconfig/aux-cache "$rootfs"/var/lib/dpkg/*-old "$rootfs"/var/cache/debconf/*-old \
       "$rootfs"/etc/*- "$rootfs"/root/.cache
: > "$rootfs/var/log/dpkg.log"
# /dev is the runtime's (mmdebstrap leaves device nodes there); /tmp is a mount at run time.
find "$rootfs/dev" "$rootfs/tmp" -mindepth 1 -delete

# --- OCI image: one layer, written in name order with normalised times and owners.
tar --sort=name --numeric-owner --xattrs --mtime="@$SOURCE_DATE_EPOCH" --clamp-mtime \
    --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
    -C "$rootfs" -cf "$stage/layer.tar" .
config_args=()
while IFS= read -r arg; do config_args+=("$arg"); done < <("$python" - "$repo/Dockerfile" <<'PY'
"""The final stage's USER, WORKDIR, ENV, EXPOSE, ENTRYPOINT, CMD and LABEL as umoci config flags."""
import json, shlex, sys
lines, pending = [], ""
for raw in open(sys.argv[1]).read().splitlines():
    line = raw.strip()
    if not line or line.startswith("#"):
        continue
    if line.endswith("\\"):
        pending += line[:-1] + " "
        continue
    lines.append(pending + line)
    pending = ""
final = []
for line in lines:
    keyword, _, rest = line.partition(" ")
    if keyword.upper() == "FROM":
        final = []
    final.append((keyword.upper(), rest.strip()))
for keyword, rest in final:
    if keyword == "USER":
        print(f"--config.user={rest}")
    elif keyword == "WORKDIR":
        print(f"--config.workingdir={rest}")
    elif keyword in ("ENV", "LABEL"):
        flag = "--config.env" if keyword == "ENV" else "--config.label"
        for pair in shlex.split(rest):
            if "$" in pair:
                sys.exit(f"build-image: {keyword} {pair}: write the value out, no substitution")
            print(f"{flag}={pair}")
    elif keyword == "EXPOSE":
        for port in rest.split():
            print(f"--config.exposedports={port if '/' in port else port + '/tcp'}")
    elif keyword == "ENTRYPOINT":
        for part in json.loads(rest):
            print(f"--config.entrypoint={part}")
    elif keyword == "CMD":
        for part in json.loads(rest):
            print(f"--config.cmd={part}")
PY
)
[ ${#config_args[@]} -gt 5 ] || die "could not read the image configuration from the Dockerfile"
created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
oci="$stage/oci"
pack() {
  umoci init --layout "$oci"
  umoci new --image "$oci:$version"
  umoci raw add-layer --image "$oci:$version" --history.created="$created" \
    --history.created_by="scripts/build-image.sh (Debian bookworm, image/setup.sh)" "$stage/layer.tar"
  umoci config --no-history --image "$oci:$version" --os=linux --architecture=amd64 --created="$created" \
    --config.label="org.opencontainers.image.version=$version" "${config_args[@]}"
  umoci gc --layout "$oci"
}
timed pack pack >&2
rm "$stage/layer.tar"
timed export skopeo --insecure-policy copy --quiet "oci:$oci:$version" \
  "docker-archive:$stage/scalebot-$version.tar:scalebot:$version" >&2

digest=$("$python" -c 'import json,sys; print(json.load(open(sys.argv[1]))["manifests"][0]["digest"])' "$oci/index.json")
echo "$digest" > "$stage/DIGEST"
compressed=$(du -sb "$oci/blobs" | cut -f1)
unpacked=$(du -sb --apparent-size "$rootfs" | cut -f1)
echo "$(( compressed / 1048576 )) MiB compressed, $(( unpacked / 1048576 )) MiB unpacked" > "$stage/IMAGE-SIZE"
rm -rf "$rootfs" "$stage/src" "$wheels" "$stage/available.txt" "$stage/installed.txt" "$stage/unpinned.txt"
echo "total $(( $(date +%s) - started ))" >> "$stage/build-times.txt"
echo "$key" > "$stage/STAMP"
trap - EXIT
rm -rf "$dest"
mv "$stage" "$dest"
# Images of other inputs (about 400 MB each) go once nothing has used them for a day; not at once,
# since other checkouts sharing this cache may be testing theirs right now.
find "$cache_root" -mindepth 1 -maxdepth 1 -type d -name 'scalebot-*' ! -name "$(basename "$dest")" \
  ! -newermt '-1 day' -exec rm -rf {} +
log "built in $(( $(date +%s) - started )) s (phases in $dest/build-times.txt)"
report "$dest"
