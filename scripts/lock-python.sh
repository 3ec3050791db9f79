#!/usr/bin/env bash
# Regenerates the Python locks from the ranges in pyproject.toml, each package pinned with sha256
# hashes. Run it when a range changes or to take newer releases, then commit requirements/.
#   requirements/test.txt     scalebot with every extra (eks, sandbox, test), the build backend and
#                             pip (.venv of scripts/test, CI)
#   requirements/runtime.txt  scalebot's runtime dependencies, the build backend and pip, at the
#                             versions test.txt pins (.venv of scripts/scalebot: no test tools, no
#                             AWS SDK, no test control plane)
#   requirements/image.txt    the runtime dependencies and the eks extra, for the container image
#                             (Linux x86_64), at the versions test.txt pins: the image ships what
#                             was tested
#   requirements/build.txt    the build backend and pip alone, for the Dockerfile's build stage
# Needs uv (pip install uv).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo/requirements"
uv=${UV:-uv}
command -v "$uv" >/dev/null || { echo "lock-python: uv is missing: pip install uv (or set UV=/path/to/uv)" >&2; exit 2; }
"$uv" pip compile ../pyproject.toml build.in --all-extras --generate-hashes --python-version 3.11 \
  --universal --no-header -o test.txt >/dev/null
"$uv" pip compile ../pyproject.toml build.in --constraint test.txt --generate-hashes --python-version 3.11 \
  --universal --no-header -o runtime.txt >/dev/null
"$uv" pip compile ../pyproject.toml --extra eks --constraint test.txt --generate-hashes --python-version 3.11 \
  --python-platform x86_64-manylinux_2_36 --no-header -o image.txt >/dev/null
"$uv" pip compile build.in --constraint test.txt --generate-hashes --python-version 3.11 \
  --universal --no-header -o build.txt >/dev/null
echo "lock-python: requirements/test.txt, runtime.txt, image.txt and build.txt regenerated; commit them" >&2
