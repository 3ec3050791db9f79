"""scripts/scalebot installs what scalebot runs, not the test tools: a demo is no 562 MB venv of
pytest, moto and mypy.

The script runs as a user would run it, with PYTHON pointing at a stand-in interpreter that makes
the venv and writes down each pip command instead of installing (no package index needed). What
lands in the venv is then exactly the lock's pins (`--require-hashes --no-deps`), and
tests/unit/test_dockerfile.py proves requirements/runtime.txt holds no test tool and no extra.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.unit.test_dockerfile import TEST_TOOLS, locked

REPO = Path(__file__).resolve().parents[2]

STAND_IN = """#!/bin/sh
# A stand-in python3.11: makes the venv's bin/ (this script as its python, a scalebot that prints
# its arguments) and writes down each "-m pip" command instead of running it.
case "$1" in
  -c) exit 0 ;;
  -m)
    if [ "$2" = venv ]; then
      mkdir -p "$3/bin" && cp "$0" "$3/bin/python"
      printf '#!/bin/sh\\necho "scalebot $*"\\n' > "$3/bin/scalebot" && chmod +x "$3/bin/scalebot"
    else
      echo "$*" >> "{log}"
    fi ;;
esac
"""


def run_script(tmp_path: Path, *args: str) -> tuple[str, list[str]]:
    log = tmp_path / "pip.log"
    python = tmp_path / "python3.11"
    python.write_text(STAND_IN.replace("{log}", str(log)))
    python.chmod(0o755)
    env = {**os.environ, "PYTHON": str(python), "SCALEBOT_VENV": str(tmp_path / "venv")}
    env.pop("SCALEBOT_LOCK", None)
    script = [str(REPO / "scripts" / "scalebot"), *args]
    done = subprocess.run(script, check=False, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout, log.read_text().splitlines() if log.exists() else []


def test_a_fresh_venv_gets_the_runtime_lock_and_runs_the_demo(tmp_path: Path) -> None:
    out, pip = run_script(tmp_path)

    assert out == "scalebot demo\n"
    lock = REPO / "requirements" / "runtime.txt"
    assert pip == [
        f"-m pip --quiet --disable-pip-version-check install --require-hashes --no-deps -r {lock}",
        f"-m pip --quiet --disable-pip-version-check install --no-deps --no-build-isolation -e {REPO}",
    ]
    pins = locked(lock)
    assert "slack-bolt" in pins and "kubernetes" in pins
    assert not set(pins) & (TEST_TOOLS | {"boto3", "botocore", "cryptography"})


def test_an_installed_venv_is_not_installed_again(tmp_path: Path) -> None:
    run_script(tmp_path)
    out, pip = run_script(tmp_path, "--version")

    assert out == "scalebot --version\n"
    assert len(pip) == 2, "the second run installed nothing"


def test_the_sandbox_gets_the_test_lock_whose_extra_starts_the_control_plane(tmp_path: Path) -> None:
    out, pip = run_script(tmp_path, "sandbox", "up")

    assert out == "scalebot sandbox up\n"
    lock = REPO / "requirements" / "test.txt"
    assert (
        pip[0] == f"-m pip --quiet --disable-pip-version-check install --require-hashes --no-deps -r {lock}"
    )
    assert "cryptography" in locked(lock)
