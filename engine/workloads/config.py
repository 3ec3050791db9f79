"""What the workload scaler acts on: namespace selection, exclusion defaults, kinds.

Pure. Selectors are parsed once, when the configuration is built, so a typo fails at start with a
message naming the setting instead of failing at 20:00 when the cluster should go to sleep.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from engine.domain.model import LabelSelector
from engine.workloads.gitops import GITOPS_MODES, GitOpsMode
from engine.workloads.model import WORKLOAD_KINDS, Kind, NamespaceInfo
from engine.workloads.selectors import parse_selector

SYSTEM_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease")
DEFAULT_OWN_NAMESPACE = "scalebot"


@dataclass(frozen=True)
class WorkloadConfig:
    namespaces: tuple[str, ...] = ()
    """Namespaces to act on by name; empty means every namespace (subject to the selector)."""
    namespace_selector: str = ""
    """Label selector on namespaces, e.g. `env in (dev,staging)`; ANDed with `namespaces`."""
    excluded_namespaces: tuple[str, ...] = SYSTEM_NAMESPACES
    """Never touched, whatever their annotations say (the cluster's own machinery)."""
    own_namespace: str = DEFAULT_OWN_NAMESPACE
    """scalebot's namespace: always excluded, so the bot never puts itself to sleep."""
    exclude_selector: str = ""
    """Workloads, or whole namespaces, whose labels match are excluded unless an annotation says otherwise."""
    exclude_by_default: bool = False
    """Opt-in mode: only workloads (or namespaces) annotated `scalebot.io/exclude: "false"` sleep."""
    kinds: frozenset[Kind] = WORKLOAD_KINDS
    force_restore: bool = False
    """Wake restores objects changed while asleep too (default: skip and report them)."""
    gitops: GitOpsMode = "warn"
    """Workloads an Argo CD Application or Flux Kustomization/HelmRelease applies: "pause" pauses
    that owner for the sleep and restores it at wake; "warn" leaves it and says so in the plan."""
    _namespace_selector: LabelSelector = field(init=False, repr=False, compare=False)
    _exclude_selector: LabelSelector | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_namespace_selector", _parse("namespace_selector", self.namespace_selector))
        exclude = _parse("exclude_selector", self.exclude_selector) if self.exclude_selector.strip() else None
        object.__setattr__(self, "_exclude_selector", exclude)
        unknown = set(self.kinds) - WORKLOAD_KINDS
        if unknown:
            known = ", ".join(k for k in Kind if k in WORKLOAD_KINDS)
            raise ValueError(f"kinds: unknown {sorted(unknown)}; known: {known}")
        if self.gitops not in GITOPS_MODES:
            raise ValueError(f"gitops: {self.gitops!r} is not one of {', '.join(GITOPS_MODES)}")

    @property
    def protected_namespaces(self) -> frozenset[str]:
        return frozenset((*self.excluded_namespaces, self.own_namespace))

    def selects(self, namespace: NamespaceInfo) -> bool:
        """In scope (before exclusions): named, if names are given, and matching the selector."""
        if self.namespaces and namespace.name not in self.namespaces:
            return False
        return self._namespace_selector.matches(namespace.labels)

    def exclude_selector_matches(self, labels: Mapping[str, str]) -> bool:
        return self._exclude_selector is not None and self._exclude_selector.matches(labels)

    def selected_names(self, namespaces: Collection[NamespaceInfo]) -> list[str]:
        return sorted(ns.name for ns in namespaces if self.selects(ns))


def _parse(setting: str, text: str) -> LabelSelector:
    try:
        return parse_selector(text)
    except ValueError as exc:
        raise ValueError(f"{setting}: {exc}") from None
