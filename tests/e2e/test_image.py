"""The container image, built here and run: scripts/build-image.sh, unpacked with umoci, started in a
chroot as its configured user with a read-only root filesystem and the manifests' writable mounts.

No container engine runs on these machines, so the image is executed the way a runtime would: the
OCI config's user, working directory, environment, entrypoint and command, over the unpacked layer,
with /proc and a /dev of its own mounted, /tmp an emptyDir-like tmpfs, /data the volume and
/etc/scalebot the read-only config mount. Network is the host's, so `scalebot run` inside reaches
the local control plane and the local Slack Web API recorder.

Covers: the image is built once per input hash (a second run of the script reuses it); `scalebot
--version` prints the project's version; Python finds Debian's CA bundle and time zones; `scalebot
demo` completes; `scalebot run` with a config for the local control plane serves /healthz and
/readyz, verifies a Slack-signed slash command, posts the approval card it asks for, writes its
database on the volume, and exits 0 on SIGTERM; the image configuration is the Dockerfile's and the
manifests' (user, ports, working directory, environment, image name and tag); the only paths the
image's user could write are the mounts that manifests/ makes writable; the Debian packages are
exactly image/debian.lock's set, at its versions but for those the archive no longer has.

The suite builds with --allow-debian-drift: a Debian mirror keeps only the newest version of each
package, and a bookworm point release or security update must not turn a fresh clone's tests red.
What moved is printed at the end of the run with the re-lock command; the drift itself is proven
here against the archive with a version that never existed.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import tarfile
import tomllib
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot.slack.blocks.operations import ACTION_APPROVE
from localcluster import waits
from localcluster.controlplane import free_port
from tests.conftest import note_in_summary
from tests.slack.harness import Signer, SlackApiServer, all_text, get, post
from tests.unit.test_dockerfile import final_stage_config

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
CHANNEL = "C0IMAGE"
OPERATOR = "U0OPERATOR"
SECRET = "image-signing-secret"


DEVICES = {"null": (1, 3), "zero": (1, 5), "full": (1, 7), "random": (1, 8), "urandom": (1, 9), "tty": (5, 0)}


@dataclass(frozen=True)
class Built:
    directory: Path
    build_log: str

    @property
    def oci(self) -> Path:
        return self.directory / "oci"

    def blob(self, digest: str) -> Any:
        algorithm, _, value = digest.partition(":")
        return json.loads((self.oci / "blobs" / algorithm / value).read_text())

    @property
    def drift(self) -> dict[str, tuple[str, str]]:
        """name -> (locked, used) for the Debian packages the archive no longer had at the lock's version."""
        path = self.directory / "DEBIAN-DRIFT"
        moved = {}
        for line in path.read_text().splitlines() if path.exists() else []:
            name, _, versions = line.partition(": ")
            locked, _, used = versions.partition(" -> ")
            moved[name] = (locked, used)
        return moved

    def config(self) -> dict[str, Any]:
        [manifest_ref] = json.loads((self.oci / "index.json").read_text())["manifests"]
        assert manifest_ref["annotations"]["org.opencontainers.image.ref.name"] == VERSION
        manifest = self.blob(manifest_ref["digest"])
        return dict(self.blob(manifest["config"]["digest"]))


def build_image() -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHON": sys.executable}
    return subprocess.run(
        [str(REPO / "scripts" / "build-image.sh"), "--allow-debian-drift"],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.fixture(scope="module")
def image() -> Built:
    if os.geteuid() != 0:
        pytest.fail("building and running the image needs root (mmdebstrap, chroot, mounts)")
    result = build_image()
    assert result.returncode == 0, f"scripts/build-image.sh failed:\n{result.stderr[-4000:]}"
    built = Built(Path(result.stdout.strip().splitlines()[-1]), result.stderr)
    if built.drift:
        note_in_summary(
            "image: Debian moved on since image/debian.lock; the tested image has "
            + ", ".join(f"{name} {used} (locked {locked})" for name, (locked, used) in built.drift.items())
            + ". Re-lock: sudo scripts/build-image.sh --lock, review and commit image/"
        )
    return built


@pytest.fixture(scope="module")
def rootfs(image: Built, tmp_path_factory: pytest.TempPathFactory) -> Path:
    bundle = tmp_path_factory.mktemp("bundle") / "scalebot"
    subprocess.run(
        ["umoci", "unpack", "--image", f"{image.oci}:{VERSION}", str(bundle)],
        check=True,
        capture_output=True,
    )
    return bundle / "rootfs"


class Container:
    """One run of the image: mounts made on entry, every process stopped and every mount removed on
    exit (in reverse order, also when the test failed)."""

    def __init__(self, rootfs: Path, config: dict[str, Any], work: Path) -> None:
        self.rootfs = rootfs
        self.config = config["config"]
        self.work = work
        self.data = work / "data"
        self.etc = work / "etc-scalebot"
        self._stack = ExitStack()
        self._procs: list[subprocess.Popen[str]] = []

    def _mount(self, *args: str, target: Path) -> None:
        subprocess.run(["mount", *args, str(target)], check=True, capture_output=True)
        self._stack.callback(subprocess.run, ["umount", str(target)], check=True, capture_output=True)

    def _read_only(self, target: Path) -> None:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(target)], check=True, capture_output=True)

    def _devices(self, dev: Path) -> None:
        """A /dev of its own, as runc makes one: a tmpfs with the usual character devices. Never a
        bind of the host's /dev, which a cleanup that missed the unmount would empty."""
        self._mount("-t", "tmpfs", "-o", "size=64k,mode=755", "tmpfs", target=dev)
        for name, (major, minor) in DEVICES.items():
            os.mknod(dev / name, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
            (dev / name).chmod(0o666)
        links = {"fd": "", "stdin": "/0", "stdout": "/1", "stderr": "/2"}
        for name, fd in links.items():
            (dev / name).symlink_to(f"/proc/self/fd{fd}")

    def __enter__(self) -> Container:
        uid, _, gid = self.config["User"].partition(":")
        self.data.mkdir()
        os.chown(self.data, int(uid), int(gid or uid))
        self.etc.mkdir(mode=0o755)
        try:
            # The root filesystem read-only, as readOnlyRootFilesystem makes it; then the mounts
            # manifests/base/deployment.yaml puts on it.
            self._mount("--bind", str(self.rootfs), target=self.rootfs)
            self._read_only(self.rootfs)
            self._mount("-t", "proc", "proc", target=self.rootfs / "proc")
            self._devices(self.rootfs / "dev")
            self._mount("-t", "tmpfs", "-o", "size=64m,mode=1777", "tmpfs", target=self.rootfs / "tmp")
            self._mount("--bind", str(self.data), target=self.rootfs / "data")
            self._mount("--bind", str(self.etc), target=self.rootfs / "etc" / "scalebot")
            self._read_only(self.rootfs / "etc" / "scalebot")
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            for proc in self._procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(30)
        finally:
            self._stack.close()

    def command(
        self,
        args: list[str] | None = None,
        env: dict[str, str] | None = None,
        entrypoint: list[str] | None = None,
    ) -> list[str]:
        """The image's process as chroot runs it: its user, working directory and environment only
        (env -i), the entrypoint (or `entrypoint`, as `kubectl debug` or `command:` would override
        it) followed by `args` or by the image's default command."""
        environment = [*self.config["Env"], *(f"{k}={v}" for k, v in (env or {}).items())]
        argv = [
            *(self.config["Entrypoint"] if entrypoint is None else entrypoint),
            *(self.config["Cmd"] if args is None else args),
        ]
        return [
            "chroot",
            f"--userspec={self.config['User']}",
            str(self.rootfs),
            "/usr/bin/env",
            "-i",
            f"--chdir={self.config['WorkingDir']}",
            *environment,
            *argv,
        ]

    def run(
        self, args: list[str], timeout: float, entrypoint: list[str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        command = self.command(args, entrypoint=entrypoint)
        return subprocess.run(command, check=False, capture_output=True, text=True, timeout=timeout)

    def start(self, env: dict[str, str], log: Path) -> subprocess.Popen[str]:
        with log.open("w") as out:
            proc = subprocess.Popen(self.command(None, env), stdout=out, stderr=subprocess.STDOUT, text=True)
        self._procs.append(proc)
        return proc


@pytest.fixture
def container(image: Built, rootfs: Path, tmp_path: Path) -> Iterator[Container]:
    with Container(rootfs, image.config(), tmp_path) as running:
        yield running


def test_build_is_cached_by_input_hash(image: Built) -> None:
    again = build_image()
    assert again.returncode == 0, again.stderr[-4000:]
    assert Path(again.stdout.strip().splitlines()[-1]) == image.directory
    assert "cached" in again.stderr
    digest = (image.directory / "DIGEST").read_text().strip()
    assert digest.startswith("sha256:") and digest in again.stderr


def test_image_config_is_the_dockerfiles_and_the_manifests(image: Built) -> None:
    config = image.config()
    dockerfile = final_stage_config()
    assert config["architecture"] == "amd64" and config["os"] == "linux"
    assert config["config"]["User"] == dockerfile.user
    assert config["config"]["WorkingDir"] == dockerfile.workdir
    assert config["config"]["Env"] == [f"{k}={v}" for k, v in dockerfile.env.items()]
    assert config["config"]["Entrypoint"] == dockerfile.entrypoint == ["scalebot"]
    assert config["config"]["Cmd"] == dockerfile.cmd == ["run"]
    assert set(config["config"]["ExposedPorts"]) == {f"{p}/tcp" for p in dockerfile.ports}
    assert config["config"]["Labels"] == {**dockerfile.labels, "org.opencontainers.image.version": VERSION}

    # What kind/k3d load from the docker-archive is what the Deployment names (`scalebot` with the
    # kustomization's tag; the runtime normalises both to docker.io/library/scalebot:<tag>).
    kustomization = yaml.safe_load((REPO / "manifests" / "base" / "kustomization.yaml").read_text())
    [entry] = [i for i in kustomization["images"] if i["name"] == "scalebot"]
    assert entry["newTag"] == VERSION
    with tarfile.open(image.directory / f"scalebot-{VERSION}.tar") as archive:
        member = archive.extractfile("manifest.json")
        assert member is not None
        [archived] = json.load(member)
    assert archived["RepoTags"] == [f"docker.io/library/scalebot:{VERSION}"]


def lock_lines(path: Path) -> set[tuple[str, str, str]]:
    lines = [line for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]
    return {(name, version, arch) for name, version, arch in (line.split() for line in lines)}


def test_debian_packages_are_the_locks_set_at_its_versions_but_what_the_build_says_moved(
    image: Built, rootfs: Path
) -> None:
    status = (rootfs / "var" / "lib" / "dpkg" / "status").read_text()
    installed = set()
    for paragraph in status.strip().split("\n\n"):
        fields = dict(
            line.split(": ", 1) for line in paragraph.splitlines() if ": " in line and not line[0].isspace()
        )
        if fields.get("Status") == "install ok installed":
            installed.add((fields["Package"], fields["Version"], fields["Architecture"]))
    lock = lock_lines(REPO / "image" / "debian.lock")
    assert {(name, arch) for name, _, arch in installed} == {(name, arch) for name, _, arch in lock}
    drift = image.drift
    expected = {(n, drift[n][1] if n in drift else v, a) for n, v, a in lock}
    assert installed == expected
    assert all(drift[n][0] == v for n, v, _ in lock if n in drift) and set(drift) <= {n for n, _, _ in lock}
    # The lock the image was built from, next to it.
    assert lock_lines(image.directory / "debian.lock") == installed
    assert not {name for name, _, _ in lock} & {"apt", "perl", "gcc", "make", "passwd"}


def mmdebstrap_with_the_builds_pins(
    work: Path, lock: str, *flags: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    """scripts/build-image.sh's pinning step (its setup hook, scripts/debian-pin-hook.sh) for `lock`
    against the Debian archive the build uses, resolving and downloading only (mmdebstrap's extract
    variant); returns the run and name -> version of the packages apt chose."""
    (work / "lock").write_text(lock)
    sources = os.environ.get("SCALEBOT_DEBIAN_SOURCES", "/etc/apt/sources.list.d/debian.sources")
    names = ",".join(line.split()[0] for line in lock.splitlines() if not line.startswith("#"))
    hook = REPO / "scripts" / "debian-pin-hook.sh"
    result = subprocess.run(
        [
            "mmdebstrap",
            "--quiet",
            "--mode=root",
            "--variant=extract",
            "--architectures=amd64",
            f"--include={names}",
            f"--setup-hook=sh '{hook}' \"$1\" '{sys.executable}' '{work}/lock' '{work}' {' '.join(flags)}",
            f"--extract-hook=ls \"$1/var/cache/apt/archives\" > '{work / 'debs'}'",
            "bookworm",
            str(work / "root"),
            *([sources] if Path(sources).is_file() and "bookworm" in Path(sources).read_text() else []),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    chosen = {}
    if (work / "debs").exists():
        for deb in (work / "debs").read_text().split():
            if deb.endswith(".deb"):
                name, version, _ = deb.split("_")
                chosen[name] = version.replace("%3a", ":")
    return result, chosen


def offered(available: str, name: str) -> list[str]:
    """The versions of `name` in `apt-cache show` output."""
    return [
        line.removeprefix("Version: ")
        for stanza in available.split("\n\n")
        if f"Package: {name}\n" in stanza + "\n"
        for line in stanza.splitlines()
        if line.startswith("Version: ")
    ]


def newest(versions: list[str]) -> str:
    best = versions[0]
    for version in versions[1:]:
        if subprocess.run(["dpkg", "--compare-versions", version, "gt", best], check=False).returncode == 0:
            best = version
    return best


def test_a_locked_version_the_archive_no_longer_has(image: Built, tmp_path: Path) -> None:
    """A release build stops and names the re-lock command; a drift-tolerant one installs the
    archive's current version of that package (and only what is gone moves) and reports it; what
    stays pinned is held at its locked version. (`image`: the build installed mmdebstrap.)"""
    real = lock_lines(REPO / "image" / "debian.lock")
    locked = {(n, v, a) for n, v, a in real if n in ("netbase", "debconf")}
    lock = "".join(f"{n} {v} {a}\n" for n, v, a in sorted(locked)) + "tzdata 2000a-0+deb12u1 all\n"

    (tmp_path / "strict").mkdir()
    strict, _ = mmdebstrap_with_the_builds_pins(tmp_path / "strict", lock)
    assert strict.returncode != 0
    assert "tzdata 2000a-0+deb12u1 all: the archive has " in strict.stderr
    assert "Re-lock: sudo scripts/build-image.sh --lock" in strict.stderr

    work = tmp_path / "drift"
    work.mkdir()
    drifted, chosen = mmdebstrap_with_the_builds_pins(work, lock, "--allow-drift")
    assert drifted.returncode == 0, drifted.stderr[-3000:]
    available = (work / "available.txt").read_text()
    # tzdata, and whichever of the real lock's versions Debian has since replaced.
    gone = {"tzdata"} | {n for n, v, _ in locked if v not in offered(available, n)}
    assert set((work / "unpinned.txt").read_text().split()) == gone
    assert "tzdata 2000a-0+deb12u1 all: the archive has " in drifted.stderr
    used = {n: newest(offered(available, n)) if n in gone else v for n, v, _ in lock_lines(work / "lock")}
    assert chosen == used, "the gone ones at the archive's newest, the others at the lock's"
    # The build's check afterwards: the same package set, only the gone ones moved, reported as such.
    installed = "".join(f"{n} {chosen[n]} {a}\n" for n, _, a in sorted(lock_lines(work / "lock")))
    (work / "installed").write_text(installed)
    check = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "debian_lock.py"),
            "check",
            *(str(work / f) for f in ("lock", "installed", "unpinned.txt", "DRIFT")),
        ],
        check=False,
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stderr
    assert f"tzdata: 2000a-0+deb12u1 -> {used['tzdata']}\n" in (work / "DRIFT").read_text()
    assert len((work / "DRIFT").read_text().splitlines()) == len(gone)


def test_only_the_mounted_paths_are_writable_by_the_image_user(image: Built, rootfs: Path) -> None:
    uid, _, gid = image.config()["config"]["User"].partition(":")
    writable: set[str] = set()
    for directory, dirnames, filenames in os.walk(rootfs):
        for name in [*dirnames, *filenames]:
            path = Path(directory) / name
            info = path.lstat()
            if stat.S_ISLNK(info.st_mode):
                continue
            mine = info.st_uid == int(uid) and info.st_mode & stat.S_IWUSR
            ours = info.st_gid == int(gid) and info.st_mode & stat.S_IWGRP
            if mine or ours or info.st_mode & stat.S_IWOTH:
                writable.add("/" + str(path.relative_to(rootfs)))
    # Device nodes and /proc are the runtime's; the image ships none.
    assert writable == {"/data", "/tmp"}
    deployment = yaml.safe_load((REPO / "manifests" / "base" / "deployment.yaml").read_text())
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert {path for path, m in mounts.items() if not m.get("readOnly")} == writable


def test_version(container: Container) -> None:
    result = container.run(["--version"], timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["scalebot", VERSION]


def test_tls_trust_and_time_zones_come_from_the_image(container: Container) -> None:
    """Slack's Web API is public TLS: Python's default context must find Debian's CA bundle. Schedules
    name IANA zones: the system database must be there, not only the tzdata wheel."""
    probe = (
        "import pathlib, ssl, sys, zoneinfo\n"
        "cafile = ssl.get_default_verify_paths().cafile\n"
        "count = pathlib.Path(cafile).read_text().count('BEGIN CERTIFICATE') if cafile else 0\n"
        "zone = zoneinfo.ZoneInfo('Europe/Berlin')\n"
        "print(count, sys.version.split()[0], zoneinfo.TZPATH[0])\n"
    )
    result = container.run(["-c", probe], timeout=60, entrypoint=["python"])
    assert result.returncode == 0, result.stderr
    certificates, python, tzpath = result.stdout.split()
    assert int(certificates) > 100
    assert python.startswith("3.11.")
    assert (container.rootfs / tzpath.lstrip("/") / "Europe" / "Berlin").is_file()


def test_demo_completes(container: Container) -> None:
    result = container.run(["demo"], timeout=240)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "SIMULATED" in result.stdout
    assert "Now waking the cluster back" in result.stdout


@pytest.fixture
def slack() -> Iterator[SlackApiServer]:
    server = SlackApiServer().start()
    yield server
    server.close()


def test_run_serves_health_and_answers_a_signed_slash_command(
    container: Container,
    slack: SlackApiServer,
    scalebot_kubeconfig: Path,
    node_pool: Callable[..., list[str]],
    unique_name: str,
) -> None:
    pool = f"{unique_name}-web"
    pool_key = f"{unique_name}.scalebot.test/pool"
    node_pool(2, name=pool, labels={pool_key: pool})
    http_port, health_port = free_port(), free_port()
    # The config and kubeconfig where manifests/ mounts them (SCALEBOT_CONFIG's directory).
    (container.etc / "kubeconfig").write_text(scalebot_kubeconfig.read_text())
    config = {
        "server": {"host": "127.0.0.1", "http_port": http_port, "health_port": health_port},
        "channels": {CHANNEL: "dev"},
        "clusters": {
            "dev": {
                "kubeconfig": "/etc/scalebot/kubeconfig",
                "context": "",
                "provider": "labels",
                "pool_label": pool_key,
                "default_channels": [CHANNEL],
                "policy": {"users": {OPERATOR: "operator"}, "approval_required_for": ["zero"]},
            }
        },
    }
    (container.etc / "config.yaml").write_text(yaml.safe_dump(config))
    for path in container.etc.iterdir():
        path.chmod(0o644)
    log = container.work / "scalebot.log"
    proc = container.start(
        {
            "SLACK_BOT_TOKEN": "xoxb-image-token",
            "SLACK_SIGNING_SECRET": SECRET,
            "SLACK_API_URL": slack.url,
        },
        log,
    )

    def serving() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"scalebot run exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            return get(f"http://127.0.0.1:{health_port}/readyz").status == 200
        except OSError:
            return False

    waits.wait_until(serving, 60, "scalebot run in the image ready on /readyz")
    assert get(f"http://127.0.0.1:{health_port}/healthz").status == 200
    readyz = get(f"http://127.0.0.1:{health_port}/readyz")
    assert "database ok" in readyz.body and "kubernetes ok" in readyz.body, readyz.body

    signer = Signer(SECRET)
    body = signer.slash_command(
        f"zero {pool}", user_id=OPERATOR, channel_id=CHANNEL, response_url=slack.response_url("cmd")
    )
    forged = signer.headers(body, signature="v0=" + "0" * 64)
    assert post(f"http://127.0.0.1:{http_port}/slack/events", body, forged).status == 401
    answer = post(f"http://127.0.0.1:{http_port}/slack/events", body, signer.headers(body))
    assert answer.status == 200
    card = slack.wait_for_call("chat.postMessage", lambda c: ACTION_APPROVE in str(c.body), timeout=30)
    assert card.body["channel"] == CHANNEL and pool in all_text(card)
    # The request is in the database on the volume, written as the image's user.
    database = container.data / "scalebot.db"
    assert database.stat().st_uid == int(container.config["User"].split(":")[0])

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0, log.read_text()[-3000:]
