#!/bin/sh
# Turns a Debian root filesystem that has image/packages.txt installed into scalebot's image. Runs
# as root inside that filesystem: the Dockerfile's final stage (RUN) and scripts/build-image.sh
# (chroot) both run this one script, so both images get the same user, directories and environment.
#
# Expects /wheels to hold requirements/image.txt (as image.txt), every wheel it locks, and the
# scalebot wheel. Nothing is resolved or downloaded here: --no-index, --no-deps, --require-hashes.
set -eu

# uid/gid 10001, written directly rather than with useradd (not part of Debian's Essential set, and
# it stamps the current date into /etc/shadow): no password, no home, no login shell.
grep -q '^scalebot:' /etc/group || echo 'scalebot:x:10001:' >> /etc/group
grep -q '^scalebot:' /etc/passwd \
  || echo 'scalebot:x:10001:10001:scalebot:/nonexistent:/usr/sbin/nologin' >> /etc/passwd

# The only places the process writes (manifests/ mounts a volume on each, the root stays read-only):
# /data holds the SQLite database, /tmp is HOME and scratch space. /etc/scalebot is where the
# config file is mounted.
install -d -o 10001 -g 10001 -m 0750 /data
install -d -m 1777 /tmp
install -d -m 0755 /etc/scalebot
# Debian's other world-writable directories would be more writable paths on a read-only root: its
# second scratch directory points at /tmp instead (what a library puts there lands on the /tmp
# mount), and /run/lock, for system daemons' lock files, goes (none run here).
if [ -d /var/tmp ] && [ ! -L /var/tmp ]; then rmdir /var/tmp && ln -s /tmp /var/tmp; fi
rm -rf /run/lock

# The virtual environment, without pip of its own: the locked pip wheel runs the installation from
# outside the environment. (pip still lands in it, as a declared dependency of sqlite-utils.)
python3.11 -m venv --without-pip /opt/scalebot
set -- /wheels/pip-*.whl
[ -f "$1" ] || { echo "setup: no pip wheel in /wheels" >&2; exit 1; }
pip="env PYTHONDONTWRITEBYTECODE=1 /opt/scalebot/bin/python $1/pip --quiet --disable-pip-version-check --no-cache-dir --no-input"
$pip install --no-index --find-links /wheels --require-hashes --no-deps --no-compile -r /wheels/image.txt
set -- /wheels/scalebot-*.whl
$pip install --no-index --no-deps --no-compile "$1"
# The root filesystem is read-only at run time, so bytecode is compiled now; hash-based .pyc files
# do not depend on file modification times, which the image build normalises, and a fixed hash
# seed keeps the order of set constants in them the same from one build to the next.
PYTHONHASHSEED=0 /opt/scalebot/bin/python -m compileall -q -f -j 1 --invalidation-mode unchecked-hash /opt/scalebot/lib
