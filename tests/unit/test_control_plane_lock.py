"""The test control plane is built only from what localcluster/go/ locks (no build, no network).

scripts/build-control-plane.sh builds the wrapper modules under localcluster/go/ with -mod=readonly,
so what is built is exactly what their go.mod and go.sum say. These tests check that lock against
the pins in versions.env: every pinned module at its pin, every other module at the version the
pinned module's own go.mod asks for (upstream.mod, itself checked against go.sum's hash), so nothing
in the lock was resolved "latest" or picked up a pseudo-version the pins do not explain.
"""

from __future__ import annotations

import base64
import hashlib
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LOCK = REPO / "localcluster" / "go"
BUILD_SCRIPT = REPO / "scripts" / "build-control-plane.sh"

PSEUDO_VERSION = re.compile(r"^v\d+\.\d+\.\d+-(?:\d+\.)?(?:0\.)?\d{14}-[0-9a-f]{12}$")


@dataclass
class GoMod:
    requires: dict[str, str] = field(default_factory=dict)
    replaces: dict[str, tuple[str, str]] = field(default_factory=dict)  # old path -> (new path, version)
    tools: list[str] = field(default_factory=list)


def parse_go_mod(text: str) -> GoMod:
    """The require, replace and tool directives of a go.mod (block and single-line forms)."""
    mod = GoMod()
    block: str | None = None
    for raw in text.splitlines():
        line = raw.split("//", 1)[0].strip()
        if not line:
            continue
        if block is not None:
            if line == ")":
                block = None
                continue
            verb, rest = block, line
        else:
            verb, _, rest = line.partition(" ")
            rest = rest.strip()
            if rest == "(":
                block = verb
                continue
        words = rest.split()
        if verb == "require":
            mod.requires[words[0]] = words[1]
        elif verb == "replace":
            old, new = rest.split("=>")
            new_words = new.split()
            mod.replaces[old.split()[0]] = (new_words[0], new_words[1] if len(new_words) > 1 else "")
        elif verb == "tool":
            mod.tools.append(words[0])
    return mod


def go_sum(path: Path) -> dict[tuple[str, str], str]:
    """(module, version or version/go.mod) -> h1: hash."""
    sums: dict[tuple[str, str], str] = {}
    for line in path.read_text().splitlines():
        module, version, digest = line.split()
        sums[(module, version)] = digest
    return sums


def go_mod_hash(content: bytes) -> str:
    """The h1: hash Go records for a module's go.mod (dirhash.Hash1 over the one file "go.mod")."""
    summary = f"{hashlib.sha256(content).hexdigest()}  go.mod\n".encode()
    return "h1:" + base64.b64encode(hashlib.sha256(summary).digest()).decode()


def pins() -> dict[str, str]:
    values: dict[str, str] = {}
    for line in (LOCK / "versions.env").read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            values[key.strip()] = value.strip()
    return values


def wrappers() -> dict[str, tuple[str, str]]:
    """Wrapper directory -> (the pinned module it exists for, its pinned version)."""
    p = pins()
    return {
        "k8s": ("k8s.io/kubernetes", "v" + p["K8S_VERSION"]),
        "etcd": ("go.etcd.io/etcd/server/v3", "v" + p["ETCD_VERSION"]),
        "kwok": ("sigs.k8s.io/kwok", "v" + p["KWOK_VERSION"]),
        "capi": ("sigs.k8s.io/cluster-api", "v" + p["CAPI_VERSION"]),
        "karpenter": ("sigs.k8s.io/karpenter", "v" + p["KARPENTER_VERSION"]),
    }


WRAPPERS = sorted(wrappers())


def test_the_pins_are_release_versions() -> None:
    p = pins()
    assert set(p) == {"K8S_VERSION", "ETCD_VERSION", "KWOK_VERSION", "CAPI_VERSION", "KARPENTER_VERSION"}
    for name, value in p.items():
        assert re.fullmatch(r"\d+\.\d+\.\d+", value), f"{name}={value} is not a release version"


def test_the_directory_holds_exactly_the_known_wrappers() -> None:
    on_disk = sorted(d.name for d in LOCK.iterdir() if d.is_dir())
    assert on_disk == WRAPPERS


@pytest.mark.parametrize("wrapper", WRAPPERS)
def test_the_pinned_module_is_required_at_its_pin(wrapper: str) -> None:
    module, version = wrappers()[wrapper]
    mod = parse_go_mod((LOCK / wrapper / "go.mod").read_text())
    assert mod.requires.get(module) == version


@pytest.mark.parametrize("wrapper", WRAPPERS)
def test_upstream_mod_is_the_pinned_modules_own_go_mod(wrapper: str) -> None:
    module, version = wrappers()[wrapper]
    recorded = go_sum(LOCK / wrapper / "go.sum")[(module, f"{version}/go.mod")]
    assert go_mod_hash((LOCK / wrapper / "upstream.mod").read_bytes()) == recorded


@pytest.mark.parametrize("wrapper", WRAPPERS)
def test_every_other_module_is_at_the_version_the_pinned_module_asks_for(wrapper: str) -> None:
    module, version = wrappers()[wrapper]
    mod = parse_go_mod((LOCK / wrapper / "go.mod").read_text())
    upstream = parse_go_mod((LOCK / wrapper / "upstream.mod").read_text())
    staging = f"v0.{version.removeprefix('v1.')}"  # k8s.io/api etc. are published as v0.<minor>.<patch>
    unexplained: list[str] = []
    for path, got in mod.requires.items():
        if path == module:
            continue
        asked = upstream.requires.get(path)
        if asked == "v0.0.0" and upstream.replaces.get(path, ("", ""))[0].startswith("./staging/"):
            # A staging module: the wrapper must replace it with its published twin of the same release
            # (the required version is then irrelevant: v0.0.0 as upstream, or the twin's).
            if got not in ("v0.0.0", staging) or mod.replaces.get(path) != (path, staging):
                unexplained.append(f"{path} {got} (staging module; expected {staging})")
        elif got != asked:
            kind = "pseudo-version" if PSEUDO_VERSION.match(got) else "version"
            unexplained.append(f"{path} {got} ({kind} not asked for by {module}, which asks for {asked})")
    assert mod.requires, "empty go.mod"
    assert unexplained == []


@pytest.mark.parametrize("wrapper", WRAPPERS)
def test_every_required_module_has_a_checksum(wrapper: str) -> None:
    mod = parse_go_mod((LOCK / wrapper / "go.mod").read_text())
    sums = go_sum(LOCK / wrapper / "go.sum")
    for path, version in mod.requires.items():
        if path not in mod.replaces:
            assert (path, f"{version}/go.mod") in sums, path
    for path, (new_path, version) in mod.replaces.items():
        if path in mod.requires:  # replaces of modules outside the build graph need no checksum
            assert (new_path, f"{version}/go.mod") in sums, f"replace of {path}"


def test_the_build_verifies_against_the_lock_and_resolves_nothing() -> None:
    script = BUILD_SCRIPT.read_text()
    code = "\n".join(line.split("#", 1)[0] for line in script.splitlines())
    assert re.search(r'^export [^\n]*GOFLAGS="-mod=readonly', code, re.M), "GOFLAGS must force -mod=readonly"
    assert "-mod=mod" not in code
    for resolving in ("go get", "go install", "@latest", "@upgrade", "go mod tidy"):
        assert resolving not in code, f"the build must not resolve modules ({resolving!r})"


def test_a_lock_that_disagrees_with_the_pins_fails_the_build_with_one_line(tmp_path: Path) -> None:
    """The script's lock check runs before anything is built or downloaded."""
    if shutil.which("go") is None:
        pytest.skip("needs the go command for its version check")
    copy = tmp_path / "repo"
    (copy / "scripts").mkdir(parents=True)
    shutil.copy(BUILD_SCRIPT, copy / "scripts")
    shutil.copytree(LOCK, copy / "localcluster" / "go")
    versions = copy / "localcluster" / "go" / "versions.env"
    versions.write_text(re.sub(r"ETCD_VERSION=\S+", "ETCD_VERSION=3.6.99", versions.read_text()))
    done = subprocess.run(
        ["bash", str(copy / "scripts" / "build-control-plane.sh")],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin:" + str(Path(shutil.which("go") or "").parent), "HOME": str(tmp_path)},
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "build-control-plane: localcluster/go/etcd/go.mod does not require go.etcd.io/etcd/server/v3 v3.6.99 "
        "(versions.env pins it): run scripts/bump-control-plane.sh and commit localcluster/go/"
    ]


def _registry_hosts() -> set[str]:
    """Host names of the package registries this machine is configured with (never written down)."""
    hosts: set[str] = set()
    texts: list[str] = []
    for command in (["go", "env", "GOPROXY", "GOSUMDB"], ["pip", "config", "list"]):
        if shutil.which(command[0]):
            texts.append(subprocess.run(command, capture_output=True, text=True, check=False).stdout)
    for text in texts:
        for word in re.split(r"[\s,|'\"]+", text):
            host = re.sub(r"^https?://", "", word).split("/", 1)[0]
            if "." in host and re.fullmatch(r"[A-Za-z0-9.-]+", host):
                hosts.add(host)
    return hosts


def test_no_package_registry_host_is_named_in_the_repository() -> None:
    if not (REPO / ".git").exists() or shutil.which("git") is None:
        pytest.skip("needs a git checkout")
    hosts = _registry_hosts()
    if not hosts:
        pytest.skip("no registry configured on this machine to look for")
    found = subprocess.run(
        ["git", "grep", "-l", "-F", *[arg for h in sorted(hosts) for arg in ("-e", h)], "--", "."],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert found.returncode in (0, 1), found.stderr
    assert found.stdout.split() == []


def test_a_checksum_that_disagrees_with_the_lock_is_explained_as_such() -> None:
    from localcluster.binaries import _explain

    tail = [
        "verifying go.uber.org/zap@v1.27.0: checksum mismatch",
        "\tdownloaded: h1:aJMhYGrd5QSmlpLMr2MftRKl7t8J8PTZPA732ud/XR8=",
        "\tgo.sum:     h1:bJMhYGrd5QSmlpLMr2MftRKl7t8J8PTZPA732ud/XR8=",
        "SECURITY ERROR",
    ]
    headline = _explain(1, tail).splitlines()[0]
    assert "does not match the committed lock (localcluster/go/*/go.sum)" in headline


@pytest.mark.parametrize(
    "line",
    [
        'go: k8s.io/api@v0.36.3: Get "https://mirror.example/k8s.io/api/@v/v0.36.3.info": dial tcp: '
        "lookup mirror.example: no such host",
        "go: reading https://mirror.example/sigs.k8s.io/kwok/@v/v0.8.0.zip: 403 Forbidden",
        'verifying module: k8s.io/api@v0.36.3: Get "https://checksums.example/lookup": i/o timeout',
    ],
)
def test_an_unreachable_module_source_is_explained_without_naming_a_host(line: str) -> None:
    from localcluster.binaries import _explain

    headline = _explain(1, [line]).splitlines()[0]
    assert "check your Go module proxy setting" in headline
    assert "golang" not in headline
