"""A local AWS endpoint for tests: moto in server mode, a real HTTP server on 127.0.0.1.

scalebot's boto3 clients reach it through the `aws_endpoint_url` option (tests only), with
credentials from the standard chain: the environment variables `aws_environment` sets, with the
shared config and credentials files pointed at nothing, so a developer's own AWS setup is never read.
"""

from __future__ import annotations

import logging
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from moto.server import ThreadedMotoServer

REGION = "eu-west-1"


def aws_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Fake credentials and the region in the environment, for boto3's standard chain."""
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@contextmanager
def moto_endpoint() -> Iterator[str]:
    """Start moto's server on a free port; yield its URL; reset its state and stop it on exit."""
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    try:
        yield url
    finally:
        # moto keeps its backends in this process: the next endpoint starts empty.
        try:
            reset = urllib.request.Request(f"{url}/moto-api/reset", method="POST")
            urllib.request.urlopen(reset, timeout=10).close()
        finally:
            server.stop()
