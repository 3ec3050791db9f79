"""Whether a workload is excluded from sleep, and why.

Pure; `now` is an argument. Precedence (engine-semantics §7): scalebot's own namespace and the
configured system namespaces are never touched; otherwise the workload's annotations decide, then
its namespace's annotations, then the configuration (exclude selector, opt-in mode). At each level
scalebot's vocabulary is read before kube-downscaler's, so teams moving from kube-downscaler keep
their `downscaler/exclude` and `downscaler/exclude-until` annotations working.

An `exclude-until` that has passed no longer excludes; it is returned as `expired` so the report can
point at the stale annotation (people set these and forget them). An unreadable value excludes:
leaving a workload running is the safe mistake.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from engine.domain.model import format_time
from engine.workloads.config import WorkloadConfig
from engine.workloads.model import NamespaceInfo, WorkloadInfo

VOCABULARIES = ("scalebot.io", "downscaler")
_DATE_ONLY = re.compile(r"^\d{4}-\d{2}-\d{2}$")


@dataclass(frozen=True, slots=True)
class Verdict:
    excluded: bool | None
    """None: this level says nothing, ask the next one."""
    reason: str = ""
    expired: tuple[str, ...] = ()
    """Sentences about `exclude-until` annotations found at this level that have passed."""


def parse_until(text: str) -> datetime:
    """RFC 3339 (offset or `Z`; none means UTC) or a bare date, read as 00:00 UTC as kube-downscaler does."""
    value = text.strip()
    if _DATE_ONLY.match(value):
        return datetime.fromisoformat(value).replace(tzinfo=UTC)
    if "T" not in value and " " not in value:
        raise ValueError(f"not a date or an RFC 3339 time: {text!r}")
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def annotation_verdict(annotations: Mapping[str, str], *, now: datetime, level: str) -> Verdict:
    """What one object's annotations say; `level` ("annotation", "namespace annotation") starts the reason."""
    expired: list[str] = []
    for vocabulary in VOCABULARIES:
        until_key, flag_key = f"{vocabulary}/exclude-until", f"{vocabulary}/exclude"
        until = annotations.get(until_key)
        if until is not None:
            try:
                deadline = parse_until(until)
            except ValueError:
                reason = f'{level} {until_key}="{until}" is unreadable (treated as excluded)'
                return Verdict(True, reason, tuple(expired))
            if now < deadline:
                reason = f"{level} {until_key}={until} (excluded until {format_time(deadline)})"
                return Verdict(True, reason, tuple(expired))
            expired.append(f"{until_key}={until} expired at {format_time(deadline)}")
        flag = annotations.get(flag_key)
        if flag is not None:
            return _flag_verdict(flag, flag_key, level, tuple(expired))
    return Verdict(None, "", tuple(expired))


def _flag_verdict(flag: str, key: str, level: str, expired: tuple[str, ...]) -> Verdict:
    value = flag.strip().lower()
    if value in ("true", "false"):
        return Verdict(value == "true", f"{level} {key}={value}", expired)
    return Verdict(True, f'{level} {key}="{flag}" is not true or false (treated as excluded)', expired)


def namespace_verdict(namespace: NamespaceInfo, config: WorkloadConfig, *, now: datetime) -> Verdict:
    """The namespace level: protected namespaces decide outright, then the namespace's annotations."""
    if namespace.name == config.own_namespace:
        return Verdict(True, "scalebot's own namespace")
    if namespace.name in config.excluded_namespaces:
        return Verdict(True, f"namespace {namespace.name} is excluded by configuration")
    return annotation_verdict(namespace.annotations, now=now, level="namespace annotation")


def decide(
    workload: WorkloadInfo,
    namespace: NamespaceInfo,
    namespace_level: Verdict,
    config: WorkloadConfig,
    *,
    now: datetime,
) -> Verdict:
    """The verdict for one workload (never None); `expired` covers the workload's own annotations."""
    if namespace.name in config.protected_namespaces:
        return namespace_level
    own = annotation_verdict(workload.annotations, now=now, level="annotation")
    if own.excluded is not None:
        return own
    if namespace_level.excluded is not None:
        return Verdict(namespace_level.excluded, namespace_level.reason, own.expired)
    return Verdict(*_config_verdict(workload, namespace, config), own.expired)


def _config_verdict(
    workload: WorkloadInfo, namespace: NamespaceInfo, config: WorkloadConfig
) -> tuple[bool, str]:
    if config.exclude_selector_matches(workload.labels):
        return True, f'labels match exclude_selector "{config.exclude_selector}"'
    if config.exclude_selector_matches(namespace.labels):
        return True, f'namespace labels match exclude_selector "{config.exclude_selector}"'
    if config.exclude_by_default:
        return True, 'not opted in (exclude_by_default; annotate scalebot.io/exclude: "false" to include)'
    return False, ""
