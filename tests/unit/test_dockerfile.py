"""The Dockerfile, read as text (no Docker on this machine): what a reviewer would check by eye.

Covers: every FROM is the pinned Python patch release on slim-bookworm (after ARG substitution),
never `latest`; the build is multi-stage and the final stage copies the environment from the build
stage and installs no build tools; the final USER is a numeric non-root uid, the same one the
Deployment in manifests/ runs as; ENTRYPOINT/CMD are `scalebot run` in exec form, and `scalebot` is
the project's console script; the .dockerignore is an allow-list that keeps secrets and caches out.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
PINNED_BASE = re.compile(r"python:3\.11\.\d+-slim-bookworm(@sha256:[0-9a-f]{64})?")
BUILD_TOOLS = ("gcc", "g++", "build-essential", "make ", "apt-get install", "apk add", "cargo", "rustc")


@dataclass
class Stage:
    base: str
    name: str = ""
    instructions: list[tuple[str, str]] = field(default_factory=list)


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, comments dropped and continuation lines joined."""
    result: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        keyword, _, args = line.partition(" ")
        result.append((keyword.upper(), args.strip()))
    assert not pending, "the Dockerfile ends inside a continuation line"
    return result


def stages(text: str) -> list[Stage]:
    args: dict[str, str] = {}
    found: list[Stage] = []
    for keyword, rest in instructions(text):
        if keyword == "ARG" and not found:
            name, _, default = rest.partition("=")
            args[name] = default
        elif keyword == "FROM":
            parts = rest.split()
            base = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args[m.group(1) or m.group(2)], parts[0])
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else ""
            found.append(Stage(base=base, name=name))
        else:
            assert found, f"{keyword} before the first FROM"
            found[-1].instructions.append((keyword, rest))
    return found


def dockerfile() -> str:
    return (REPO / "Dockerfile").read_text()


def test_every_stage_uses_the_pinned_python_base() -> None:
    found = stages(dockerfile())
    assert found, "no FROM in the Dockerfile"
    for stage in found:
        assert PINNED_BASE.fullmatch(stage.base), f"{stage.base!r} is not python:3.11.<patch>-slim-bookworm"
    requires = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    assert ">=3.11" in requires and "<3.12" in requires, "the image's Python must be the project's"


def test_nothing_is_latest() -> None:
    for keyword, rest in instructions(dockerfile()):
        assert "latest" not in rest.lower(), f"{keyword} {rest}: never build on a moving tag"
    for stage in stages(dockerfile()):
        assert ":" in stage.base.split("/")[-1], f"{stage.base} has no tag, i.e. latest"


def test_multi_stage_final_stage_has_no_build_tools() -> None:
    build, final = stages(dockerfile())[0], stages(dockerfile())[-1]
    assert build.name, "the build stage is named, so the final stage can copy from it"
    copies = [rest for keyword, rest in final.instructions if keyword == "COPY"]
    assert any(rest.startswith(f"--from={build.name} ") for rest in copies), "final stage copies the venv"
    for keyword, rest in final.instructions:
        if keyword == "RUN":
            assert not any(tool in rest for tool in BUILD_TOOLS), f"build tooling in the final stage: {rest}"
            assert "pip install" not in rest, "the final stage installs nothing"


def test_final_user_is_numeric_non_root_and_matches_the_deployment() -> None:
    final = stages(dockerfile())[-1]
    users = [rest for keyword, rest in final.instructions if keyword == "USER"]
    assert users, "the final stage sets USER"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) >= 10000, "numeric, so runAsNonRoot can verify it; above host uids"
    assert not gid or (gid.isdigit() and int(gid) != 0)
    deployment = yaml.safe_load((REPO / "manifests" / "base" / "deployment.yaml").read_text())
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == int(uid)
    assert pod["containers"][0]["securityContext"]["runAsUser"] == int(uid)


def test_entrypoint_is_the_console_script_in_exec_form() -> None:
    final = dict(stages(dockerfile())[-1].instructions)
    assert json.loads(final["ENTRYPOINT"]) == ["scalebot"]
    assert json.loads(final["CMD"]) == ["run"]
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert "scalebot" in scripts


def test_dockerignore_is_an_allow_list() -> None:
    lines = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert lines[0] == "*", "start by excluding everything"
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    assert allowed == {"pyproject.toml", "README.md", "engine", "bot", "localcluster"}
    copied = {
        source.rstrip("/")
        for keyword, rest in stages(dockerfile())[0].instructions
        if keyword == "COPY" and not rest.startswith("--from")
        for source in rest.split()[:-1]
    }
    assert copied <= allowed, f"the build copies files the context does not contain: {copied - allowed}"
