#!/usr/bin/env bash
# Regenerates requirements/test.txt (scalebot, its test tools, the build backend and pip, each pinned
# with sha256 hashes) from the ranges in pyproject.toml and requirements/build.in. Run it when a range
# changes or to take newer releases, then commit requirements/. Needs uv (pip install uv).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo/requirements"
uv=${UV:-uv}
command -v "$uv" >/dev/null || { echo "lock-python: uv is missing: pip install uv (or set UV=/path/to/uv)" >&2; exit 2; }
"$uv" pip compile ../pyproject.toml build.in --extra test --generate-hashes --python-version 3.11 \
  --universal --no-header -o test.txt
echo "lock-python: requirements/test.txt regenerated; commit it" >&2
