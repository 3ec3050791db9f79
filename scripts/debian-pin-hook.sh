#!/bin/sh
# mmdebstrap setup hook of scripts/build-image.sh: after reading the archive's current index, pins
# image/debian.lock's versions in the new root's apt preferences (scripts/debian_lock.py pin).
#   debian-pin-hook.sh ROOT PYTHON LOCK OUT [--allow-drift]
# Writes OUT/available.txt (every version the archive has of the lock's packages) and
# OUT/unpinned.txt (the packages left to move); fails, listing them, when a locked version is gone
# unless --allow-drift.
set -eu
root=$1 python=$2 lock=$3 out=$4
shift 4
export APT_CONFIG="$MMDEBSTRAP_APT_CONFIG"  # the new root's apt, as mmdebstrap configured it
apt-get update -qq >&2
# A name the archive no longer has at all shows as a gone version (debian_lock.py), not here.
# shellcheck disable=SC2046
apt-cache show $(grep -v '^#' "$lock" | cut -d' ' -f1) > "$out/available.txt" 2>/dev/null || true
mkdir -p "$root/etc/apt/preferences.d"
"$python" "$(dirname "$0")/debian_lock.py" pin "$lock" "$out/available.txt" \
  "$root/etc/apt/preferences.d/debian-lock" "$out/unpinned.txt" "$@"
