"""One cluster's settings (`clusters.<name>` in the config file): its connection, pool provider,
channels, policy, consolidation rules, drain report style, GitOps mode, wake waves and savings post.

Read from the document (`bot.config.document`) by `cluster_from_document`, which `bot.config.settings.load`
calls once per cluster; the keys and their defaults are in `bot.config.settings`'s docstring.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path

from bot.config import channel_refs, providers
from bot.config.document import DocumentNode, SettingsError
from engine.domain.settings import ConsolidationPolicy, ScaleDownRules
from engine.domain.wake_waves import WakeWaves, WaveSpec
from engine.drain.report import Style as ReportStyle
from engine.kube.ratelimit import DEFAULT_BURST, DEFAULT_QPS
from engine.operations.policy import ClusterPolicy, Role
from engine.savings.weekly_post import SavingsPostSpec, parse_post_time
from engine.schedules.core.spec import ScheduleError, parse_zone
from engine.workloads.gitops import GITOPS_MODES, GitOpsMode

_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


_SLACK_USER = re.compile(r"[UW][A-Z0-9]+")


_SLACK_GROUP = re.compile(r"S[A-Z0-9]+")


APPROVAL_TAGS = (
    "drain",
    "scale_down",
    "scale_up",
    "zero",
    "wake",
    "force",
    "cordon",
    "uncordon",
    "consolidate",
)


@dataclass(frozen=True, slots=True)
class ClusterSettings:
    name: str
    context: str
    kubeconfig: Path | None = None
    provider: str = providers.DEFAULT_PROVIDER
    options: Mapping[str, str] = field(default_factory=dict)
    """The provider's own settings (bot.config.providers), validated, defaults filled in."""
    default_channels: tuple[str, ...] = ()
    protected: bool = False
    policy: ClusterPolicy = field(default_factory=lambda: ClusterPolicy(cluster=""))
    api_qps: float = DEFAULT_QPS
    """Client-side request rate to the API server (`engine.kube.ratelimit.DEFAULT_QPS` says why 200).
    API Priority and Fairness still applies above it."""
    api_burst: int = DEFAULT_BURST
    drain_report: ReportStyle = "current"
    """Cluster API's condition layout for drain reports: per-Pod lines (v1.9+) or grouped ("legacy")."""
    node_hour_prices: Mapping[str, float] = field(default_factory=dict)
    """Pool → what one node of it costs per hour: `report savings` turns node-hours into money."""
    savings_report: SavingsPostSpec | None = None
    """When `scalebot run` posts the weekly savings (report and chart) and where; None: never."""
    gitops: GitOpsMode = "warn"
    """Workloads an Argo CD Application or Flux Kustomization/HelmRelease applies: "pause" pauses the
    owner for a sleep and restores it exactly at wake; "warn" leaves it and names it in the plan."""
    wake_waves: WakeWaves = field(default_factory=WakeWaves)
    """The order pools wake in, wave by wave (`engine.domain.wake_waves`); empty: all at once."""


_CLUSTER_KEYS = (
    "context",
    "kubeconfig",
    "provider",
    "default_channel",
    "default_channels",
    "allowed_channels",
    "protected",
    "policy",
    "api_qps",
    "api_burst",
    "consolidation",
    "drain_report",
    "node_hour_prices",
    "savings_report",
    "gitops",
    "wake_waves",
)
"""Keys every cluster entry may have; the provider adds its own (bot.config.providers)."""


def cluster_from_document(name: str, node: DocumentNode) -> ClusterSettings:
    if not _NAME.fullmatch(name) or len(name) > 63:
        raise SettingsError(f"{node.path}: cluster names are DNS-1123 labels (lowercase, digits, '-', '.')")
    provider = node.string("provider", providers.DEFAULT_PROVIDER)
    try:
        spec = providers.spec(provider)
    except providers.ProviderOptionError as exc:
        raise SettingsError(f"{node.path}.provider: {exc}") from None
    for key, child in node.items():
        owners = [p.name for p in providers.PROVIDERS.values() if key in p.option_keys()]
        if owners and provider not in owners:
            raise SettingsError(
                f"{child.path}: a setting of provider {' / '.join(owners)}, not of {provider} "
                f"(set provider: {owners[0]}, or remove it)"
            )
    node.only(*_CLUSTER_KEYS, *spec.option_keys())
    given = {key: node.string(key, "") for key in spec.option_keys() if node.has(key)}
    try:
        options = spec.resolve(given)
    except providers.ProviderOptionError as exc:
        raise SettingsError(f"{node.path}.{exc}") from None
    channels = list(node.strings("default_channels"))
    if node.has("default_channel"):
        channels.insert(0, node.string("default_channel", ""))
    channels = [channel_ref(c, f"{node.path}.default_channels[{i}]") for i, c in enumerate(channels)]
    allowed = [
        channel_ref(c, f"{node.path}.allowed_channels[{i}]")
        for i, c in enumerate(node.strings("allowed_channels"))
    ]
    kubeconfig = node.string("kubeconfig", "")
    protected = node.boolean("protected", False)
    return ClusterSettings(
        name=name,
        context=node.string("context", name),
        kubeconfig=Path(kubeconfig).expanduser() if kubeconfig else None,
        provider=provider,
        options=options,
        default_channels=tuple(dict.fromkeys(channels)),
        protected=protected,
        policy=replace(
            _policy(name, node.child("policy"), protected=protected, channels=frozenset(allowed)),
            consolidation=_consolidation(node.child("consolidation")),
        ),
        api_qps=node.number("api_qps", DEFAULT_QPS, low=1.0, high=1000.0),
        api_burst=node.integer("api_burst", DEFAULT_BURST, low=1, high=2000),
        drain_report=_drain_report(node),
        node_hour_prices={
            pool: prices.number(pool, 0.0, low=0.0, high=10_000.0)
            for prices in (node.child("node_hour_prices"),)
            for pool, _ in prices.items()
        },
        savings_report=_savings_report(node.child("savings_report"), channels),
        gitops=_gitops(node),
        wake_waves=_wake_waves(node.child("wake_waves")),
    )


def _gitops(node: DocumentNode) -> GitOpsMode:
    value = node.string("gitops", "warn")
    for mode in GITOPS_MODES:
        if value == mode:
            return mode
    raise SettingsError(f"{node.path}.gitops: expected {' or '.join(GITOPS_MODES)}, got {value!r}")


def _savings_report(node: DocumentNode, default_channels: list[str]) -> SavingsPostSpec | None:
    """The weekly savings post, off unless the key is given; its time is checked by the schedule
    parser, so "Mon 9" or "Montag 09:00" is refused with an example."""
    if node.value is None:
        return None
    node.only("schedule", "timezone", "channel")
    if not node.has("schedule"):
        raise SettingsError(f'{node.path}.schedule: required, one weekday and a time, e.g. "Mon 09:00"')
    try:
        at = parse_post_time(node.string("schedule", ""))
    except ScheduleError as exc:
        raise SettingsError(f"{node.path}.schedule: {exc}") from None
    tz = node.string("timezone", "UTC")
    try:
        parse_zone(tz)
    except ScheduleError as exc:
        raise SettingsError(f"{node.path}.timezone: {exc}") from None
    channel = node.string("channel", default_channels[0] if default_channels else "")
    if not channel:
        raise SettingsError(
            f"{node.path}.channel: no channel to post in; give one (C…) or the cluster's default_channel"
        )
    return SavingsPostSpec(at=at, tz=tz, channel=channel_ref(channel, f"{node.path}.channel"))


def _wake_waves(node: DocumentNode) -> WakeWaves:
    """`wake_waves`: a list of waves, each a list of pool names or
    {pools, ready_share, timeout, workloads_available}."""
    if node.value is None:
        return WakeWaves()
    if not isinstance(node.value, list) or not node.value:
        raise SettingsError(f"{node.path}: expected a list of waves, e.g. [[system], [data], [apps]]")
    waves: list[WaveSpec] = []
    seen: dict[str, int] = {}
    for i, item in enumerate(node.value):
        wave = DocumentNode(item if isinstance(item, dict) else {"pools": item}, f"{node.path}[{i}]")
        wave.only("pools", "ready_share", "timeout", "workloads_available")
        pools = wave.strings("pools")
        if not pools or any(not p.strip() for p in pools):
            raise SettingsError(f"{wave.path}.pools: expected the names of the pools of this wave")
        for pool in pools:
            if pool in seen:
                raise SettingsError(f"{wave.path}: pool {pool!r} is already in wave {seen[pool] + 1}")
            seen[pool] = i
        timeout = wave.duration("timeout", timedelta(0)) if wave.has("timeout") else None
        if timeout is not None and timeout <= timedelta(0):
            raise SettingsError(f"{wave.path}.timeout: expected a duration above zero, such as 10m")
        waves.append(
            WaveSpec(
                pools=pools,
                ready_share=_share(wave, "ready_share"),
                timeout_seconds=timeout.total_seconds() if timeout is not None else None,
                workloads_available=wave.boolean("workloads_available", False),
            )
        )
    return WakeWaves(tuple(waves))


def _share(node: DocumentNode, key: str) -> float:
    """A share such as `50%` or `0.5`, above 0 and at most 100%; default 100%."""
    value, path = node._get(key)
    if value is None:
        return 1.0
    text = str(value).strip()
    try:
        share = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        share = -1.0
    if isinstance(value, bool) or not 0 < share <= 1:
        raise SettingsError(
            f"{path}: expected a share above 0 and at most 100%, such as 100% or 50%, got {value!r}"
        )
    return share


def _drain_report(node: DocumentNode) -> ReportStyle:
    value = node.string("drain_report", "current")
    if value == "legacy":
        return "legacy"
    if value != "current":
        raise SettingsError(f"{node.path}.drain_report: expected current or legacy, got {value!r}")
    return "current"


def _policy(
    cluster: str, node: DocumentNode, *, protected: bool, channels: frozenset[str] = frozenset()
) -> ClusterPolicy:
    node.only(
        "users",
        "groups",
        "approval_required_for",
        "approvals_required",
        "protected_approvals",
        "allow_self_approval",
        "request_ttl",
        "drain_one_at_a_time",
        "scale_up_ceiling",
    )
    tags = node.strings("approval_required_for", ("zero", "scale_down", "force"))
    for index, tag in enumerate(tags):
        if tag not in APPROVAL_TAGS:
            known = ", ".join(APPROVAL_TAGS)
            raise SettingsError(f"{node.path}.approval_required_for[{index}]: unknown kind '{tag}' ({known})")
    ttl = node.duration("request_ttl", timedelta(minutes=30))
    if ttl <= timedelta(0):
        raise SettingsError(f"{node.path}.request_ttl: must be longer than zero")
    return ClusterPolicy(
        cluster=cluster,
        users=_roles(node.child("users"), _SLACK_USER, "a Slack user ID (U… or W…)"),
        groups=_roles(node.child("groups"), _SLACK_GROUP, "a Slack user group ID (S…)"),
        approval_required_for=frozenset(tags),
        approvals_required=node.integer("approvals_required", 1, low=1, high=10),
        allow_self_approval=node.boolean("allow_self_approval", False),
        protected=protected,
        protected_approvals=node.integer("protected_approvals", 2, low=1, high=10),
        request_ttl=ttl,
        channels=channels,
        drain_one_at_a_time=node.boolean("drain_one_at_a_time", False),
        scale_up_ceiling=node.number("scale_up_ceiling", 2.0, low=1.0, high=1000.0),
    )


def _consolidation(node: DocumentNode) -> ConsolidationPolicy:
    node.only(
        "node_grace",
        "max_nodes",
        "allow_alongside_autoscaler",
        "empty_nodes",
        "unneeded_time",
        "empty_node_ttl",
        "delay_after_add",
        "empty_node_batch",
        "interval",
        "evictor",
        "evictor_auto_approve",
        *_SCALE_DOWN_KEYS,
    )
    if node.has("unneeded_time") and node.has("empty_node_ttl"):
        raise SettingsError(f"{node.path}.empty_node_ttl: the older name of unneeded_time; give only one")
    ttl_key = "empty_node_ttl" if node.has("empty_node_ttl") else "unneeded_time"
    durations = {
        key: node.duration(key, default)
        for key, default in (
            ("node_grace", timedelta(minutes=5)),
            (ttl_key, timedelta(minutes=10)),
            ("delay_after_add", timedelta(minutes=10)),
        )
    }
    for key, value in durations.items():
        if value < timedelta(0):
            raise SettingsError(f"{node.path}.{key}: must not be negative")
    interval = node.duration("interval", timedelta(seconds=60))
    if interval < timedelta(seconds=10):
        raise SettingsError(f"{node.path}.interval: at least 10s (each cycle lists the whole cluster)")
    return ConsolidationPolicy(
        node_grace=durations["node_grace"],
        max_nodes=node.integer("max_nodes", 10, low=1, high=1000),
        allow_alongside_autoscaler=node.boolean("allow_alongside_autoscaler", False),
        empty_nodes=node.boolean("empty_nodes", False),
        unneeded_time=durations[ttl_key],
        delay_after_add=durations["delay_after_add"],
        empty_node_batch=node.integer("empty_node_batch", 10, low=1, high=1000),
        interval=interval,
        evictor=node.boolean("evictor", False),
        evictor_auto_approve=node.boolean("evictor_auto_approve", False),
        rules=_scale_down_rules(node),
    )


_SCALE_DOWN_KEYS = (
    "utilization_threshold",
    "gpu_utilization_threshold",
    "ignore_daemonsets_utilization",
    "skip_nodes_with_system_pods",
    "system_pod_disruption_timeout",
    "skip_nodes_with_local_storage",
    "skip_nodes_with_custom_controller_pods",
)
"""cluster-autoscaler's scale-down flags (underscores for dashes), with its defaults."""


def _scale_down_rules(node: DocumentNode) -> ScaleDownRules:
    default = ScaleDownRules()
    timeout = node.duration("system_pod_disruption_timeout", default.system_pod_disruption_timeout)
    if timeout < timedelta(0):
        raise SettingsError(f"{node.path}.system_pod_disruption_timeout: must not be negative")
    return ScaleDownRules(
        utilization_threshold=node.number(
            "utilization_threshold", default.utilization_threshold, low=0.0, high=1.0
        ),
        gpu_utilization_threshold=node.number(
            "gpu_utilization_threshold", default.gpu_utilization_threshold, low=0.0, high=1.0
        ),
        ignore_daemonsets_utilization=node.boolean(
            "ignore_daemonsets_utilization", default.ignore_daemonsets_utilization
        ),
        skip_nodes_with_system_pods=node.boolean(
            "skip_nodes_with_system_pods", default.skip_nodes_with_system_pods
        ),
        system_pod_disruption_timeout=timeout,
        skip_nodes_with_local_storage=node.boolean(
            "skip_nodes_with_local_storage", default.skip_nodes_with_local_storage
        ),
        skip_nodes_with_custom_controller_pods=node.boolean(
            "skip_nodes_with_custom_controller_pods", default.skip_nodes_with_custom_controller_pods
        ),
    )


def _roles(node: DocumentNode, pattern: re.Pattern[str], what: str) -> dict[str, Role]:
    roles: dict[str, Role] = {}
    labels = ", ".join(r.label for r in Role)
    for key, child in node.items():
        if not pattern.fullmatch(key):
            raise SettingsError(f"{child.path}: '{key}' is not {what}; use IDs, never display names")
        value = child.value
        if not isinstance(value, str) or value.lower() not in {r.label for r in Role}:
            raise SettingsError(f"{child.path}: unknown role '{value}' ({labels})")
        roles[key] = Role[value.upper()]
    return roles


def channel_ref(value: str, path: str) -> str:
    """A channel as the config names it: its ID (`C…`, Slack's `<#C…|name>`) or `#name`. A name
    stays a name here (loading reads no network); `with_channel_ids` replaces it with its ID before
    anything is served, so no rule ever compares a name."""
    found = channel_refs.channel_id(value)
    if found is not None:
        return found
    if channel_refs.channel_name(value) is not None:
        return value
    raise SettingsError(f"{path}: '{value}' is not a channel ID (C… or G…) or #name")
