"""A one-context kubeconfig with a bearer token, for tests whose API server is a local stand-in (one
that refuses, stalls or is not there)."""

from __future__ import annotations

from pathlib import Path


def token_kubeconfig(path: Path, server: str, *, insecure_skip_tls_verify: bool = False) -> Path:
    """Write a kubeconfig for `server` with a token user as its current context; returns `path`."""
    tls = ", insecure-skip-tls-verify: true" if insecure_skip_tls_verify else ""
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f'clusters: [{{name: c, cluster: {{server: "{server}"{tls}}}}}]\n'
        "users: [{name: u, user: {token: t0ken}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n"
    )
    return path
