"""The Dockerfile, scripts/build-image.sh and manifests/ describe one image; read as text, they agree.

(tests/e2e/test_image.py builds the image with scripts/build-image.sh and runs it; no Docker engine
runs here, so the Dockerfile itself is only read.)

Covers: every FROM is Debian bookworm slim, never `latest`; the Dockerfile and the script install
the same things (image/packages.txt, requirements/image.txt with hashes, image/setup.sh); the final
stage installs no build tools and builds nothing; the final USER is numeric and non-root and is the
Deployment's runAsUser/runAsGroup; EXPOSE is every port the manifests use and nothing else; the
environment's database, config, HOME and working directory are on the mounts the Deployment makes
(writable ones exactly where the image writes, readOnlyRootFilesystem on); the kustomization's image
tag is the project's version; ENTRYPOINT/CMD are `scalebot run` in exec form; the .dockerignore is an
allow-list; the image's Python lock is pyproject.toml's runtime dependencies and the eks extra, and
scripts/scalebot's is the runtime dependencies alone (no test tools, no other extra), every pin hashed
and at the version requirements/test.txt tests.
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
DEBIAN_BASE = re.compile(r"debian:bookworm(-\d{8})?-slim(@sha256:[0-9a-f]{64})?")
BUILD_TOOLS = ("gcc", "g++", "build-essential", "make ", "apk add", "cargo", "rustc", "python3-pip", "-dev ")
TEST_TOOLS = {"pytest", "pytest-timeout", "hypothesis", "ruff", "mypy", "import-linter", "py-spy", "moto"}


@dataclass
class Stage:
    base: str
    name: str = ""
    instructions: list[tuple[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class ImageConfig:
    user: str
    workdir: str
    env: dict[str, str]
    ports: list[int]
    entrypoint: list[str]
    cmd: list[str]
    labels: dict[str, str]


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


def final_stage_config() -> ImageConfig:
    """The image configuration the Dockerfile's final stage declares (what scripts/build-image.sh
    copies into the OCI config)."""
    final = stages(dockerfile())[-1].instructions
    env: dict[str, str] = {}
    labels: dict[str, str] = {}
    for keyword, rest in final:
        if keyword in ("ENV", "LABEL"):
            for pair in shlex.split(rest):
                key, _, value = pair.partition("=")
                (env if keyword == "ENV" else labels)[key] = value
    last = dict(final)
    return ImageConfig(
        user=last["USER"],
        workdir=last["WORKDIR"],
        env=env,
        ports=[int(p.split("/")[0]) for keyword, rest in final if keyword == "EXPOSE" for p in rest.split()],
        entrypoint=json.loads(last["ENTRYPOINT"]),
        cmd=json.loads(last["CMD"]),
        labels=labels,
    )


def manifest(*parts: str) -> Any:
    return yaml.safe_load((REPO / "manifests").joinpath(*parts).read_text())


def deployment_container() -> dict[str, Any]:
    [container] = manifest("base", "deployment.yaml")["spec"]["template"]["spec"]["containers"]
    return dict(container)


def test_every_stage_is_debian_bookworm_slim() -> None:
    found = stages(dockerfile())
    assert found, "no FROM in the Dockerfile"
    for stage in found:
        assert DEBIAN_BASE.fullmatch(stage.base), f"{stage.base!r} is not debian:bookworm[-<date>]-slim"
    requires = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    packages = (REPO / "image" / "packages.txt").read_text()
    assert ">=3.11" in requires and "<3.12" in requires and "\npython3.11=" in packages


def test_nothing_is_latest() -> None:
    for keyword, rest in instructions(dockerfile()):
        assert "latest" not in rest.lower(), f"{keyword} {rest}: never build on a moving tag"
    for stage in stages(dockerfile()):
        assert ":" in stage.base.split("/")[-1], f"{stage.base} has no tag, i.e. latest"


def test_packages_are_pinned_and_locked() -> None:
    wanted = [
        line
        for line in (REPO / "image" / "packages.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    lock = {
        line.split()[0]: line.split()[1]
        for line in (REPO / "image" / "debian.lock").read_text().splitlines()
        if line and not line.startswith("#")
    }
    assert wanted
    for pin in wanted:
        name, _, version = pin.partition("=")
        assert version, f"{pin}: every package is pinned to a version (scripts/build-image.sh --lock)"
        assert lock.get(name) == version, f"{pin}: image/debian.lock has {lock.get(name)}"
    assert re.search(r"^# source-date-epoch: \d+$", (REPO / "image" / "debian.lock").read_text(), re.M)


def test_dockerfile_and_build_script_install_the_same_things() -> None:
    build, final = stages(dockerfile())[0], stages(dockerfile())[-1]
    build_runs = " ".join(rest for keyword, rest in build.instructions if keyword == "RUN")
    build_copies = " ".join(rest for keyword, rest in build.instructions if keyword == "COPY")
    assert "requirements/image.txt" in build_copies and "image/setup.sh" in build_copies
    assert "--require-hashes" in build_runs and "-r /wheels/image.txt" in build_runs
    # The build backend is the locked one (requirements/build.txt, hashed), never resolved anew.
    assert (
        "requirements/build.txt" in build_copies
        and "--require-hashes --no-deps -r /tools/build.txt" in build_runs
    )
    assert "--no-build-isolation" in build_runs

    final_runs = [rest for keyword, rest in final.instructions if keyword == "RUN"]
    final_copies = [rest for keyword, rest in final.instructions if keyword == "COPY"]
    assert final_copies == ["image/packages.txt /tmp/packages.txt"]
    [install] = [run for run in final_runs if "apt-get install" in run]
    assert "--no-install-recommends $(grep -v '^#' /tmp/packages.txt)" in install
    [setup] = [run for run in final_runs if "setup.sh" in run]
    assert setup == f"--mount=type=bind,from={build.name},source=/wheels,target=/wheels sh /wheels/setup.sh"
    for run in final_runs:
        assert not any(tool in run for tool in BUILD_TOOLS), f"build tooling in the final stage: {run}"
        assert "pip " not in run, "the final stage installs Python packages only through setup.sh"

    script = (REPO / "scripts" / "build-image.sh").read_text()
    for shared in ("image/packages.txt", "image/setup.sh", "requirements/image.txt", "$repo/Dockerfile"):
        assert shared in script, f"scripts/build-image.sh does not use {shared}"


def test_final_user_is_numeric_non_root_and_matches_the_deployment() -> None:
    uid, _, gid = final_stage_config().user.partition(":")
    assert uid.isdigit() and int(uid) >= 10000, "numeric, so runAsNonRoot can verify it; above host uids"
    assert gid.isdigit() and int(gid) != 0
    pod = manifest("base", "deployment.yaml")["spec"]["template"]["spec"]
    for context in (pod["securityContext"], deployment_container()["securityContext"]):
        assert context["runAsNonRoot"] is True
        assert context["runAsUser"] == int(uid) and context["runAsGroup"] == int(gid)
    assert pod["securityContext"]["fsGroup"] == int(gid), "the data volume is group-writable for the user"
    setup = (REPO / "image" / "setup.sh").read_text()
    assert f"scalebot:x:{uid}:{gid}:" in setup and f"scalebot:x:{gid}:" in setup


def test_exposed_ports_are_the_manifests_ports() -> None:
    exposed = set(final_stage_config().ports)
    base_ports = {p["containerPort"] for p in deployment_container()["ports"]}
    http_patch = yaml.safe_load(manifest("overlays", "http", "kustomization.yaml")["patches"][0]["patch"])
    overlay_ports = {op["value"]["containerPort"] for op in http_patch if op["path"].endswith("/ports/-")}
    assert base_ports | overlay_ports == exposed
    server = manifest("base", "config.yaml")["server"]
    assert {server["http_port"], server["health_port"]} == exposed
    assert manifest("overlays", "http", "service.yaml")["spec"]["ports"][0]["port"] in overlay_ports


def test_image_writes_only_where_the_deployment_mounts_writable_volumes() -> None:
    config = final_stage_config()
    container = deployment_container()
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    writable = {path for path, m in mounts.items() if not m.get("readOnly")}
    assert writable == {"/data", "/tmp"}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["SCALEBOT_DB"] == config.env["SCALEBOT_DB"]
    assert env["SCALEBOT_CONFIG"] == config.env["SCALEBOT_CONFIG"]
    assert str(Path(config.env["SCALEBOT_DB"]).parent) in writable
    assert config.workdir in writable and config.env["HOME"] in writable
    config_mount = mounts[str(Path(config.env["SCALEBOT_CONFIG"]).parent)]
    assert config_mount["readOnly"] is True
    # Nothing writes bytecode next to the read-only sources.
    assert config.env["PYTHONDONTWRITEBYTECODE"] == "1"
    setup = (REPO / "image" / "setup.sh").read_text()
    for path in sorted(writable):
        created = re.search(rf"^install -d .*{re.escape(path)}$", setup, re.M)
        assert created, f"setup.sh does not create {path}"


def test_kustomization_tags_the_projects_version() -> None:
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    [entry] = [i for i in manifest("base", "kustomization.yaml")["images"] if i["name"] == "scalebot"]
    assert entry["newTag"] == version
    assert deployment_container()["image"] == "scalebot"


def test_entrypoint_is_the_console_script_in_exec_form() -> None:
    config = final_stage_config()
    assert config.entrypoint == ["scalebot"]
    assert config.cmd == ["run"]
    assert deployment_container()["args"] == config.cmd
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
    assert allowed == {
        "pyproject.toml",
        "README.md",
        "engine",
        "bot",
        "localcluster",
        "image",
        "requirements/image.txt",
        "requirements/build.txt",
    }
    copied = {
        source.rstrip("/")
        for stage in stages(dockerfile())
        for keyword, rest in stage.instructions
        if keyword == "COPY" and not rest.startswith("--from")
        for source in rest.split()[:-1]
    }
    covered = {source for source in copied if any(source == a or source.startswith(a + "/") for a in allowed)}
    assert covered == copied, f"the build copies files the context does not contain: {copied - covered}"


def locked(path: Path) -> dict[str, tuple[str, str]]:
    """name -> (version, its block of lines) for every `name==version` pin in a uv lock; each has hashes."""
    pins: dict[str, tuple[str, str]] = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", path.read_text()):
        match = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)(?: ; ([^\\\n]+?))?\s*(?:\\|\n|$)", block)
        if match:
            assert "--hash=sha256:" in block, f"{path.name}: {match.group(0)} has no hash"
            # A universal lock may pin a package twice under exclusive markers (one version for
            # Python 3.11, another for 3.12+); only the pin this interpreter would install counts.
            if match.group(3) and not Marker(match.group(3)).evaluate():
                continue
            pins[canonicalize_name(match.group(1))] = (match.group(2), block)
    return pins


@pytest.mark.parametrize(
    ("lock", "extras", "also"),
    [
        # The image: what `scalebot run` runs, with every pool provider (EKS's AWS SDK included).
        ("image.txt", ("eks",), set()),
        # scripts/scalebot's .venv: what scalebot runs, and the build backend for its editable install.
        ("runtime.txt", (), {"pip", "setuptools"}),
    ],
)
def test_runtime_locks_are_pyprojects_dependencies_at_the_tested_versions(
    lock: str, extras: tuple[str, ...], also: set[str]
) -> None:
    """requirements/image.txt, runtime.txt and build.txt come from scripts/lock-python.sh; run it
    again after changing pyproject.toml's dependencies (never merge hashes by hand)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    optional = project["optional-dependencies"]
    pins = locked(REPO / "requirements" / lock)
    tested = locked(REPO / "requirements" / "test.txt")
    wanted = [
        Requirement(spec) for spec in [*project["dependencies"], *(d for e in extras for d in optional[e])]
    ]
    for requirement in wanted:
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} is missing from requirements/{lock}: run scripts/lock-python.sh"
        assert requirement.specifier.contains(pins[name][0]), (
            f"requirements/{lock} pins {name}=={pins[name][0]} outside {requirement}: "
            "run scripts/lock-python.sh"
        )
    # uv notes "via scalebot (../pyproject.toml)" on what the project itself asks for: a dependency
    # dropped from pyproject.toml leaves no such pin behind.
    asked = {name for name, (_, block) in pins.items() if "scalebot (../pyproject.toml)" in block}
    assert asked == {canonicalize_name(r.name) for r in wanted}, (
        f"requirements/{lock} was locked from other dependencies than pyproject.toml's: "
        "run scripts/lock-python.sh"
    )
    assert also <= set(pins)
    assert not set(pins) & {canonicalize_name(t) for t in TEST_TOOLS}, f"no test tools in {lock}"
    unwanted = {
        canonicalize_name(Requirement(d).name) for e in optional if e not in extras for d in optional[e]
    }
    assert not set(pins) & unwanted, f"{lock} holds another extra's packages: {set(pins) & unwanted}"
    build = locked(REPO / "requirements" / "build.txt")
    assert set(build) == {"pip", "setuptools"}
    for name, (version, _) in [*pins.items(), *build.items()]:
        assert tested.get(name, ("",))[0] == version, (
            f"{lock} pins {name}=={version}, the tests run {tested.get(name, ('nothing',))[0]}: "
            "run scripts/lock-python.sh"
        )
