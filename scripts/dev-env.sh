# Sourced by scripts/test and scripts/scalebot: make sure .venv holds scalebot and its test tools.
# Installs exactly what requirements/test.txt locks (every package pinned, every file checked against
# its sha256), then scalebot itself without resolving anything. Re-installs only when the lock or
# pyproject.toml changed since the last install. scripts/lock-python.sh regenerates the lock.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${SCALEBOT_VENV:-$repo/.venv}
python=${PYTHON:-python3.11}
command -v "$python" >/dev/null || python=python3
"$python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
  || { echo "scalebot needs Python 3.11 (found $("$python" --version 2>&1)); set PYTHON=/path/to/python3.11" >&2; exit 2; }
stamp="$venv/.installed-$(cat "$repo/pyproject.toml" "$repo/requirements/test.txt" | sha256sum | cut -c1-12)"
if [ ! -f "$stamp" ]; then
  echo "scalebot: installing into $venv (locked: requirements/test.txt)" >&2
  [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
  pip=("$venv/bin/python" -m pip --quiet --disable-pip-version-check)
  "${pip[@]}" install --require-hashes --no-deps -r "$repo/requirements/test.txt"
  # The build backend (setuptools) comes from the lock too, hence no build isolation.
  "${pip[@]}" install --no-deps --no-build-isolation -e "$repo"
  rm -f "$venv"/.installed-*
  touch "$stamp"
fi
export PATH="$venv/bin:$PATH"
