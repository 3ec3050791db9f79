"""README "The first hour", part 3: every command against the local control plane, as scalebot's
ServiceAccount. NODE and POOL become the test's node and pool; the kubeconfig, database and pool
label are appended; stdin is a terminal that answers the zero-scale's question with "y"."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from localcluster import waits
from tests.e2e.support import CLUSTER, deployment
from tests.readme_walkthrough import blocks, commands

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]


def test_part_three_runs_as_written_against_a_cluster(
    admin_api: Any,
    scalebot_kubeconfig: Path,
    namespace: str,
    node_pool: Callable[..., list[str]],
    pool_key: str,
    unique_name: str,
    tmp_path: Path,
) -> None:
    pool = f"{unique_name}-web"
    [node] = node_pool(1, labels={pool_key: pool})
    deployment(admin_api, namespace, "web", 1, node_selector={pool_key: pool}, grace=1)
    assert [c.split()[1] for c in commands("3.")] == ["plan", "drain", "zero", "ops", "wake"]
    script = "\n".join(blocks("3.")).replace("NODE", node).replace("POOL", pool)
    shell = "set -euo pipefail\n" + (
        'scalebot() { case "$1" in\n'
        '  drain) "$PYTHON" -m bot "$@" --kubeconfig "$KC" ;;\n'
        '  ops) "$PYTHON" -m bot "$@" --kubeconfig "$KC" --db "$DB" ;;\n'
        '  *) "$PYTHON" -m bot "$@" --kubeconfig "$KC" --db "$DB" --pool-label "$LABEL" --cluster "$NAME";;\n'
        "esac; }\n"
    )
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "PYTHONPATH": str(REPO),
        "KC": str(scalebot_kubeconfig),
        "DB": str(tmp_path / "scalebot.db"),
        "LABEL": pool_key,
        "NAME": CLUSTER,
    }
    leader, follower = os.openpty()
    try:
        os.write(leader, b"y\n")  # typed ahead: the zero-scale's question reads it
        done = subprocess.run(
            ["bash", "-c", shell + script],
            stdin=follower,
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
            timeout=600,
            check=False,
        )
    finally:
        os.close(follower)
        os.close(leader)

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"evicting pod {namespace}/web-" in done.stdout and "(server dry run)" in done.stdout
    assert "zero " in done.stdout and ": continue? [y/N]" in done.stdout
    assert '"kind": "zero"' in done.stdout and '"state": "succeeded"' in done.stdout
    waits.wait_for_deployment_available(admin_api, namespace, "web")
