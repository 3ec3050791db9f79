# Sourced by scripts/test and scripts/scalebot: make sure the venv holds scalebot and what it needs.
# SCALEBOT_LOCK names the lock: `test` (the default, scripts/test: every extra and the test tools) or
# `runtime` (scripts/scalebot: what scalebot runs, nothing else). Installs exactly what
# requirements/$SCALEBOT_LOCK.txt locks (every package pinned, every file checked against its
# sha256), then scalebot itself without resolving anything. Re-installs only when the lock or
# pyproject.toml changed since the last install; a venv installed from the current test lock serves
# `runtime` too (runtime.txt pins the versions test.txt does). scripts/lock-python.sh regenerates
# the locks.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${SCALEBOT_VENV:-$repo/.venv}
lock=${SCALEBOT_LOCK:-test}
python=${PYTHON:-python3.11}
command -v "$python" >/dev/null || python=python3
"$python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
  || { echo "scalebot needs Python 3.11 (found $("$python" --version 2>&1)); set PYTHON=/path/to/python3.11" >&2; exit 2; }
stamp_of() { echo "$venv/.installed-$1-$(cat "$repo/pyproject.toml" "$repo/requirements/$1.txt" | sha256sum | cut -c1-12)"; }
stamp=$(stamp_of "$lock")
if [ "$lock" = runtime ] && [ -f "$(stamp_of test)" ]; then stamp=$(stamp_of test); fi
if [ ! -f "$stamp" ]; then
  echo "scalebot: installing into $venv (locked: requirements/$lock.txt)" >&2
  [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
  pip=("$venv/bin/python" -m pip --quiet --disable-pip-version-check)
  "${pip[@]}" install --require-hashes --no-deps -r "$repo/requirements/$lock.txt"
  # The build backend (setuptools) comes from the lock too, hence no build isolation. Its
  # "Editable installation." notice (a boxed warning about folders named like the package, of no
  # concern in a checkout) is filtered by its text; any other warning still shows.
  PYTHONWARNINGS="ignore:Editable installation" "${pip[@]}" install --no-deps --no-build-isolation -e "$repo"
  rm -f "$venv"/.installed-*
  touch "$stamp"
fi
export PATH="$venv/bin:$PATH"
