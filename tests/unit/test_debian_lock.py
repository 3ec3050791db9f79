"""scripts/debian_lock.py, which holds the image's Debian packages at image/debian.lock's versions:
a locked version the archive no longer has stops a release build with the re-lock command, and under
--allow-drift leaves just that package to move; afterwards only the lock's set of packages passes,
and only unpinned packages may have moved. (tests/e2e/test_image.py runs it against the archive.)"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("debian_lock", REPO / "scripts" / "debian_lock.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["debian_lock"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


dl = load()
LOCK = "# source-date-epoch: 1\nnetbase 6.4 all\ntzdata 2000a-0+deb12u1 all\nlibc6 2.36-9+deb12u7 amd64\n"
AVAILABLE = """Package: netbase
Version: 6.4
Architecture: all
Description: Basic TCP/IP networking system
 continuation: not a field

Package: tzdata
Version: 2026f-0+deb12u1
Architecture: all

Package: tzdata
Version: 2026b-0+deb12u1
Architecture: all

Package: libc6
Version: 2.36-9+deb12u14
Architecture: amd64

Package: libc6
Version: 2.36-9+deb12u7
Architecture: amd64
"""


def test_a_gone_version_is_left_to_move_and_every_other_is_pinned_even_below_the_newest() -> None:
    resolution = dl.resolve(dl.read_lock(LOCK), dl.read_available(AVAILABLE))
    assert [p.name for p in resolution.gone] == ["tzdata"]
    assert dl.preferences(resolution.pinned) == (
        "Package: netbase\nPin: version 6.4\nPin-Priority: 1001\n\n"
        "Package: libc6\nPin: version 2.36-9+deb12u7\nPin-Priority: 1001\n\n"
    )


def run_pin(tmp_path: Path, *flags: str) -> int:
    (tmp_path / "lock").write_text(LOCK)
    (tmp_path / "available").write_text(AVAILABLE)
    args = ["pin", *(str(tmp_path / n) for n in ("lock", "available", "prefs", "unpinned")), *flags]
    return int(dl.main(args))


def test_strict_stops_naming_the_gone_version_and_the_relock_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_pin(tmp_path) == 1
    err = capsys.readouterr().err
    assert "tzdata 2000a-0+deb12u1 all: the archive has 2026b-0+deb12u1, 2026f-0+deb12u1" in err
    assert "sudo scripts/build-image.sh --lock" in err
    assert not (tmp_path / "prefs").exists(), "nothing written for a build that must not go on"


def test_allow_drift_unpins_only_the_gone_package_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_pin(tmp_path, "--allow-drift") == 0
    assert (tmp_path / "unpinned").read_text() == "tzdata\n"
    assert "tzdata" not in (tmp_path / "prefs").read_text()
    assert "tzdata 2000a-0+deb12u1 all: the archive has" in capsys.readouterr().err


def test_check_reports_what_moved_and_refuses_any_other_set_or_a_moved_pin() -> None:
    locked = dl.read_lock(LOCK)
    installed = dl.read_lock(LOCK.replace("2000a-0+deb12u1", "2026f-0+deb12u1"))
    assert [str(m) for m in dl.check(locked, installed, {"tzdata"})] == [
        "tzdata: 2000a-0+deb12u1 -> 2026f-0+deb12u1"
    ]
    assert dl.check(locked, locked, set()) == []
    with pytest.raises(dl.NotTheLock, match="pinned, yet installed at another version: tzdata"):
        dl.check(locked, installed, set())
    with pytest.raises(dl.NotTheLock, match=re.escape("not locked: perl-base 5.36.0-7 amd64")):
        dl.check(locked, [*locked, dl.Package("perl-base", "5.36.0-7", "amd64")], set())
    with pytest.raises(dl.NotTheLock, match=re.escape("not installed: netbase 6.4 all")):
        dl.check(locked, locked[1:], {"netbase"})
    # Same name, other architecture: another package.
    with pytest.raises(dl.NotTheLock, match="not installed: libc6"):
        dl.check(locked, [*locked[:2], dl.Package("libc6", "2.36-9+deb12u7", "i386")], {"libc6"})
