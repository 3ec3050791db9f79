# Sourced by scripts/test and scripts/scalebot: make sure .venv holds scalebot and its test tools.
# Re-installs only when pyproject.toml changed since the last install.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${SCALEBOT_VENV:-$repo/.venv}
python=${PYTHON:-python3.11}
command -v "$python" >/dev/null || python=python3
"$python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
  || { echo "scalebot needs Python 3.11 (found $("$python" --version 2>&1)); set PYTHON=/path/to/python3.11" >&2; exit 2; }
stamp="$venv/.installed-$(sha256sum "$repo/pyproject.toml" | cut -c1-12)"
if [ ! -f "$stamp" ]; then
  echo "scalebot: installing into $venv" >&2
  [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade "pip>=24"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e "$repo[test]"
  rm -f "$venv"/.installed-*
  touch "$stamp"
fi
export PATH="$venv/bin:$PATH"
