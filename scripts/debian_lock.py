"""image/debian.lock for scripts/build-image.sh: pins every locked package at its locked version
(apt preferences), checked against what the Debian archive offers right now, and afterwards checks
what was installed against the lock.

A Debian mirror keeps only the newest version of each package. When a locked version is gone:
strict (the default, release builds) stops, naming each package and the re-lock command; with
--allow-drift (the test suite's builds) the package is left unpinned, so apt installs the archive's
current version of that same package. Never a package outside the lock: `check` refuses any other
set of packages, and any other version of a package that was pinned.

  debian_lock.py pin LOCK AVAILABLE PREFERENCES UNPINNED [--allow-drift]
      AVAILABLE: `apt-cache show` of the lock's names (every version the archive has);
      writes PREFERENCES, and UNPINNED (the names left to move, one a line)
  debian_lock.py check LOCK INSTALLED UNPINNED DRIFT
      INSTALLED: "name version arch" lines (dpkg-query); writes DRIFT, "name: locked -> used" lines
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

RELOCK = "sudo scripts/build-image.sh --lock, review and commit image/"


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    arch: str


@dataclass(frozen=True)
class Resolution:
    pinned: tuple[Package, ...]  # locked versions the archive still has
    gone: tuple[Package, ...]  # locked versions the archive no longer has


def read_lock(text: str) -> list[Package]:
    packages = []
    for line in text.splitlines():
        if line.strip() and not line.startswith("#"):
            name, version, arch = line.split()
            packages.append(Package(name, version, arch))
    return packages


def read_available(text: str) -> set[Package]:
    """Every (package, version, architecture) in apt-cache show's stanzas."""
    found = set()
    for stanza in text.split("\n\n"):
        fields = dict(
            line.split(": ", 1) for line in stanza.splitlines() if ": " in line and not line[0].isspace()
        )
        if {"Package", "Version", "Architecture"} <= fields.keys():
            found.add(Package(fields["Package"], fields["Version"], fields["Architecture"]))
    return found


def resolve(locked: list[Package], available: set[Package]) -> Resolution:
    return Resolution(
        pinned=tuple(p for p in locked if p in available),
        gone=tuple(p for p in locked if p not in available),
    )


def preferences(pinned: tuple[Package, ...]) -> str:
    """Priority 1001 holds a package at that version even where the archive has a newer one."""
    return "".join(f"Package: {p.name}\nPin: version {p.version}\nPin-Priority: 1001\n\n" for p in pinned)


def gone_message(resolution: Resolution, available: set[Package]) -> str:
    lines = []
    for p in resolution.gone:
        offered = sorted(a.version for a in available if a.name == p.name and a.arch == p.arch)
        lines.append(f"  {p.name} {p.version} {p.arch}: the archive has {', '.join(offered) or 'no version'}")
    return "\n".join(lines)


@dataclass(frozen=True)
class Moved:
    name: str
    locked: str
    used: str

    def __str__(self) -> str:
        return f"{self.name}: {self.locked} -> {self.used}"


class NotTheLock(Exception):
    pass


def check(locked: list[Package], installed: list[Package], unpinned: set[str]) -> list[Moved]:
    """The packages that moved off their locked version; NotTheLock unless the set of packages (name
    and architecture) is the lock's and only unpinned packages moved."""
    want = {(p.name, p.arch): p.version for p in locked}
    have = {(p.name, p.arch): p.version for p in installed}
    problems = [f"  not installed: {n} {v} {a}" for (n, a), v in sorted(want.items()) if (n, a) not in have]
    problems += [f"  not locked: {n} {v} {a}" for (n, a), v in sorted(have.items()) if (n, a) not in want]
    moved = [Moved(n, v, have[n, a]) for (n, a), v in sorted(want.items()) if have.get((n, a), v) != v]
    problems += [f"  pinned, yet installed at another version: {m}" for m in moved if m.name not in unpinned]
    if problems:
        raise NotTheLock("\n".join(problems))
    return moved


def main_check(lock: Path, installed: Path, unpinned: Path, drift: Path) -> int:
    try:
        moved = check(
            read_lock(lock.read_text()),
            read_lock(installed.read_text()),
            set(unpinned.read_text().split()),
        )
    except NotTheLock as e:
        print(
            f"build-image: the Debian packages installed are not image/debian.lock's:\n{e}\n"
            f"Re-lock: {RELOCK}",
            file=sys.stderr,
        )
        return 1
    drift.write_text("".join(f"{m}\n" for m in moved))
    return 0


def main(argv: list[str]) -> int:
    command, *args = argv
    if command == "check":
        lock, installed, unpinned, drift = (Path(a) for a in args)
        return main_check(lock, installed, unpinned, drift)
    allow_drift = "--allow-drift" in args
    lock, available_file, prefs, drifted = (Path(a) for a in args if a != "--allow-drift")
    available = read_available(available_file.read_text())
    resolution = resolve(read_lock(lock.read_text()), available)
    if resolution.gone and not allow_drift:
        print(
            "build-image: image/debian.lock pins versions the Debian archive no longer has "
            f"(it moved on):\n{gone_message(resolution, available)}\n"
            f"Re-lock: {RELOCK}; or build from a snapshot archive (SCALEBOT_DEBIAN_SOURCES)",
            file=sys.stderr,
        )
        return 1
    if resolution.gone:
        print(
            "build-image: --allow-debian-drift: these locked versions are gone from the archive; "
            f"installing its current version of the same packages:\n{gone_message(resolution, available)}",
            file=sys.stderr,
        )
    prefs.write_text(preferences(resolution.pinned))
    drifted.write_text("".join(f"{p.name}\n" for p in resolution.gone))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
