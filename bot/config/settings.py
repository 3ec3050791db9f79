"""Process settings: a YAML config file plus the environment, validated once at start.

`load(path, env)` returns frozen, grouped dataclasses or raises `SettingsError` whose message
starts with the bad key path ("clusters.dev-eu.policy.users.U1: unknown role 'boss' (viewer,
operator, approver, admin)"), so the process can exit with one actionable line.

One cluster's entry is read by `bot.config.cluster_settings`; the document and its errors are
`bot.config.document`'s.

Environment (secrets live only here, never in the file):
    SLACK_BOT_TOKEN       xoxb-… bot token (required)
    SLACK_SIGNING_SECRET  HTTP mode request signing secret (required unless SLACK_APP_TOKEN is set)
    SLACK_APP_TOKEN       xapp-… app-level token; when set the bot runs in Socket Mode
    SLACK_API_URL         Web API base URL override, ending in '/' (GovSlack, tests)
    SCALEBOT_CONFIG       the config file, when `load` is given no path
    SCALEBOT_DB           SQLite database path (default ./scalebot.db)

Config file (every key optional except what a cluster needs to be reached):
    server:   {http_port: 3000, health_port: 8080, host: 0.0.0.0}
    sender:   {update_interval: 3s, updates_per_minute: 40, posts_per_second: 1, posts_per_minute: 120}
    workers:  8                                     # the bot's own executor for slow commands
    runner:                                         # how many operations run at once, and how
      max_operations: 200                           # in progress at once (waiting ones included)
      max_operations_per_cluster: 8                 # ... on one cluster; more wait their turn
      step_workers: 32                              # threads running steps (a wait holds none)
      max_evictions_in_flight: 128                  # evictions/cordons in flight, every cluster
      max_evictions_per_cluster: 64                 # one cluster's ceiling (below the above)
      eviction_processes: 0                         # worker processes sending evictions (0: none)
    calendars:                                      # iCalendar files schedules follow (calendar=NAME)
      releases: /etc/scalebot/releases.ics          # relative paths: from the config file's folder
    channels: {C0123: dev-eu}                       # channel ID -> default cluster
    fleet_digest_channel: C0FLEET                   # optional: one summary of the schedules of a minute
    currency: EUR                                   # of every node_hour_prices (ISO 4217 code)
    slack:                                          # who may use the bot (Slack Connect brings others)
      allowed_team_ids: [T0123]                     # default: the bot token's own workspace
      allowed_enterprise_ids: [E0123]               # default: not checked
      allowed_app_ids: [A0123]                      # default: not checked
    clusters:
      dev-eu:
        context: dev-eu                             # kubeconfig context (default: the cluster name)
        kubeconfig: /etc/scalebot/kubeconfig        # default: $KUBECONFIG / ~/.kube/config / in-cluster
        provider: labels                            # a name from bot.config.providers.PROVIDERS
        pool_label: scalebot.io/pool                # the provider's own options (bot.config.providers)
        api_qps: 200                                # client-side requests/s to the API server; api_burst: 300
        default_channels: [C0123]                   # or default_channel: C0123
        allowed_channels: [C0123]                   # operate it only from these (default: the channels
                                                    # mapped to it: default_channels and `channels:`;
                                                    # with none, any channel but another cluster's)
        protected: false
        policy:
          users: {U0ADMIN: admin, U0OPS: operator}
          groups: {S0SRE: approver}
          approval_required_for: [zero, scale_down, force]
          approvals_required: 1
          protected_approvals: 2
          allow_self_approval: false
          request_ttl: 30m
          drain_one_at_a_time: false                # scale-down / zero: non-empty nodes one at a time
          scale_up_ceiling: 2                       # a scale-up past 2x a pool's size (or past its own
                                                    # maximum) needs approval like a scale-down
        consolidation:                              # /scale consolidate, scalebot consolidate
          node_grace: 5m                            # nodes younger than this stay
          max_nodes: 10                             # nodes one plan removes at most
          allow_alongside_autoscaler: false         # refuse while cluster-autoscaler/Karpenter/CAST AI run
          empty_nodes: false                        # remove nodes with only DaemonSet/mirror pods ...
          unneeded_time: 10m                        # ... unneeded this long (also Evictor mode; older
                                                    # name empty_node_ttl), up to empty_node_batch: 10
          delay_after_add: 10m                      # unattended: nothing removed this soon after a node joins
          interval: 60s                             # how often the policies look
          evictor: false                            # Evictor mode: propose the plan when it changes
          evictor_auto_approve: false               # ... and run it without an approval
          utilization_threshold: 0.5                # cluster-autoscaler's rules, with its defaults
          gpu_utilization_threshold: 0.5
          ignore_daemonsets_utilization: false
          skip_nodes_with_system_pods: true
          system_pod_disruption_timeout: 1h
          skip_nodes_with_local_storage: true
          skip_nodes_with_custom_controller_pods: true
        drain_report: current                       # Cluster API condition layout: current | legacy
        gitops: warn                                # Argo CD / Flux owners of workloads: pause | warn
        wake_waves:                                 # wake pools in this order (default: all at once)
          - [system]                                # a wave: its pools (all nodes Ready, ready timeout)
          - pools: [data]                           # or with its own share and timeout
            ready_share: 50%                        # of the wave's nodes Ready before the next wave
            timeout: 10m                            # then the thread says what it waited for; go on
            workloads_available: true               # and the workloads its sleep displaced available
                                                    # pools no wave names wake last, together
        savings_report:                             # the weekly savings post (default: off)
          schedule: Mon 09:00                       # one weekday and a 24-hour time
          timezone: Europe/Berlin                   # IANA zone (default UTC)
          channel: C0123                            # default: the cluster's default channel
Tokens are `Secret`s: their repr and str are masked, so a logged Settings shows no secret.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from bot.config import channel_refs
from bot.config.cluster_settings import ClusterSettings, channel_ref, cluster_from_document
from bot.config.document import DocumentNode
from bot.config.document import SettingsError as SettingsError  # noqa: PLC0414 (load's error: callers catch it here)
from engine.domain.settings import RunnerSettings
from engine.operations.policy import ClusterPolicy
from engine.schedules.calendars import CalendarError, CalendarFile, load_calendar


class Secret:
    """A token or secret that never shows itself in logs, reprs or messages."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('********')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __bool__(self) -> bool:
        return bool(self._value)


@dataclass(frozen=True, slots=True)
class SlackSettings:
    bot_token: Secret
    signing_secret: Secret | None = None
    app_token: Secret | None = None
    """Set: Socket Mode (no inbound network). Unset: HTTP mode at /slack/events."""
    api_url: str | None = None
    """Web API base URL ending in '/'; None means slack_sdk's default (https://slack.com/api/)."""
    allowed_team_ids: tuple[str, ...] = ()
    """Workspaces (T…) whose people may use the bot; empty: the bot token's own workspace."""
    allowed_enterprise_ids: tuple[str, ...] = ()
    """Enterprise Grid organisations (E…); empty: not checked."""
    allowed_app_ids: tuple[str, ...] = ()
    """This Slack app's ID (A…); empty: not checked (the signature already binds the app's secret)."""

    @property
    def socket_mode(self) -> bool:
        return self.app_token is not None


@dataclass(frozen=True, slots=True)
class ServerSettings:
    host: str = "0.0.0.0"
    http_port: int = 3000
    """Slack's Request URL points here (HTTP mode): POST /slack/events, GET /healthz."""
    health_port: int = 8080
    """/healthz for Kubernetes probes; the HTTP port serves it too, so in HTTP mode this may equal it."""


@dataclass(frozen=True, slots=True)
class SenderSettings:
    update_interval: float = 3.0
    """Seconds between two chat.update calls of one message: progress stays live, Tier 3 stays safe."""
    updates_per_minute: float = 40.0
    """Global chat.update budget; Tier 3 is about 50/min per workspace, this leaves headroom."""
    posts_per_second: float = 1.0
    """chat.postMessage per channel (Slack allows about one per second, with short bursts)."""
    posts_per_minute: float = 120.0
    """chat.postMessage across the workspace (every channel, thread replies and direct messages):
    never more in any rolling minute. Slack documents "several hundred a minute" per workspace and
    app, with no figure; 120 is that phrase read at its lowest (200) with 40 % to spare, because a
    refusal then lands on whichever post comes next, a final one included."""


@dataclass(frozen=True, slots=True)
class Settings:
    slack: SlackSettings
    clusters: Mapping[str, ClusterSettings] = field(default_factory=dict)
    channels: Mapping[str, str] = field(default_factory=dict)
    """Channel ID -> the cluster commands in that channel act on when none is named."""
    server: ServerSettings = ServerSettings()
    sender: SenderSettings = SenderSettings()
    workers: int = 8
    """Threads of the bot's own executor (planning, status): never Bolt's listener pool."""
    db_path: Path = Path("scalebot.db")
    config_path: Path | None = None
    workloads_return_timeout: timedelta = timedelta(minutes=5)
    """How long a wake, its nodes Ready, follows the workloads not yet available before it says
    which are still not back and why."""
    calendars: Mapping[str, CalendarFile] = field(default_factory=dict)
    """iCalendar files by name (`calendars:`), read and checked at load: schedules follow them."""
    fleet_digest_channel: str | None = None
    """Channel ID where the schedules that fire in the same minute get one summary message."""
    runner: RunnerSettings = RunnerSettings()
    """The operation runner `scalebot run` uses (`runner:`; `workloads_return_timeout` included)."""
    currency: str | None = None
    """The currency of every cluster's `node_hour_prices` (an ISO 4217 code), shown beside money."""

    def default_cluster(self, channel: str) -> str | None:
        """The channel's cluster; with a single configured cluster, that one."""
        if channel in self.channels:
            return self.channels[channel]
        if len(self.clusters) == 1:
            return next(iter(self.clusters))
        return None

    def cluster_names(self) -> list[str]:
        return sorted(self.clusters)

    def channel_for(self, cluster: str) -> str | None:
        """Where operations started outside Slack (CLI, schedules without a channel) are shown."""
        settings = self.clusters.get(cluster)
        return settings.default_channels[0] if settings and settings.default_channels else None

    def node_hour_prices(self) -> dict[tuple[str, str], float]:
        """(cluster, pool) → price per node-hour, for the savings report."""
        return {
            (name, pool): price
            for name, cluster in self.clusters.items()
            for pool, price in cluster.node_hour_prices.items()
        }

    def policies(self) -> dict[str, ClusterPolicy]:
        """Each cluster's policy, with the channels it is operated from (`cluster_policies`)."""
        return cluster_policies(self.clusters, self.channels)


def own_channels(cluster: ClusterSettings, channels: Mapping[str, str]) -> frozenset[str]:
    """The channels a cluster is operated from: its `allowed_channels` when given, else the channels
    mapped to it (its `default_channels` and the `channels:` entries naming it)."""
    if cluster.policy.channels:
        return cluster.policy.channels
    mapped = {c for c, name in channels.items() if name == cluster.name}
    return frozenset(mapped | set(cluster.default_channels))


def cluster_policies(
    clusters: Mapping[str, ClusterSettings], channels: Mapping[str, str]
) -> dict[str, ClusterPolicy]:
    """Channels separate clusters by default: a cluster's requests, clicks and approvals come from
    its own channels (`own_channels`); one with none of its own is still never operated from
    another cluster's, so a channel mapped to dev-eu cannot reach prod."""
    own = {name: own_channels(c, channels) for name, c in clusters.items()}
    return {
        name: replace(
            c.policy,
            channels=own[name],
            other_channels=frozenset().union(*(mine for other, mine in own.items() if other != name)),
        )
        for name, c in clusters.items()
    }


def check_channel_separation(clusters: Mapping[str, ClusterSettings], channels: Mapping[str, str]) -> None:
    """A protected cluster never accepts other channels: `scalebot run` needs it to have channels of
    its own, and its `allowed_channels` may not name a channel mapped to another cluster."""
    for name, cluster in clusters.items():
        if not cluster.protected:
            continue
        if not own_channels(cluster, channels):
            raise SettingsError(
                f"clusters.{name}: a protected cluster is operated only from its own channels; give it "
                "default_channels (or allowed_channels)"
            )
        for channel in sorted(cluster.policy.channels):
            theirs = channels.get(channel)
            if theirs is not None and theirs != name:
                raise SettingsError(
                    f"clusters.{name}.allowed_channels: {channel} is the channel of {theirs}; a protected "
                    "cluster never accepts another cluster's channel"
                )


SECRET_ENV = ("SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "SLACK_SIGNING_SECRET")
"""The environment variables that carry secrets; `load` reads them once into `Secret` values."""


def forget_secret_env(env: MutableMapping[str, str]) -> None:
    """Remove the Slack secrets from the process environment once the settings hold them.

    Bolt's `App` reads SLACK_BOT_TOKEN from the environment whenever it is given no token, and
    since scalebot hands it a client built from the settings it then warns, on every start, that
    the token "will be unused". With the variables gone Bolt has nothing to ignore, and no library
    or child process can find the tokens in the environment either.
    """
    for name in SECRET_ENV:
        env.pop(name, None)


def load(
    path: str | Path | None, env: Mapping[str, str] | None = None, *, require_slack: bool = True
) -> Settings:
    """Read the config file (`path`, else $SCALEBOT_CONFIG, else none) and the environment."""
    env = os.environ if env is None else env
    config_path = (
        Path(path) if path else (Path(env["SCALEBOT_CONFIG"]) if env.get("SCALEBOT_CONFIG") else None)
    )
    raw = _read(config_path) if config_path else {}
    doc = DocumentNode(raw, "")
    doc.only(
        "server",
        "sender",
        "workers",
        "channels",
        "clusters",
        "slack",
        "workloads_return_timeout",
        "calendars",
        "fleet_digest_channel",
        "runner",
        "currency",
    )
    clusters = {name: cluster_from_document(name, node) for name, node in doc.child("clusters").items()}
    channels = _channels(doc, clusters)
    if require_slack:  # the CLI and the console are in no channel
        check_channel_separation(clusters, channels)
    workloads_return_timeout = doc.duration("workloads_return_timeout", timedelta(minutes=5))
    return Settings(
        slack=_slack(env, require_slack, doc.child("slack")),
        clusters=clusters,
        channels=channels,
        server=_server(doc.child("server")),
        sender=_sender(doc.child("sender")),
        workers=doc.integer("workers", 8, low=1, high=64),
        db_path=Path(env.get("SCALEBOT_DB") or "scalebot.db"),
        config_path=config_path,
        workloads_return_timeout=workloads_return_timeout,
        calendars=_calendars(doc.child("calendars"), config_path),
        fleet_digest_channel=_digest_channel(doc),
        runner=_runner(doc.child("runner"), workloads_return_timeout),
        currency=_currency(doc),
    )


def _runner(node: DocumentNode, workloads_return_timeout: timedelta) -> RunnerSettings:
    """`runner:`: how many operations one instance runs at once, and how many evictions it sends."""
    node.only(
        "max_operations",
        "max_operations_per_cluster",
        "step_workers",
        "max_evictions_in_flight",
        "max_evictions_per_cluster",
        "eviction_processes",
    )
    default = RunnerSettings()
    total = node.integer("max_operations", default.max_operations, low=1, high=10_000)
    per_cluster = node.integer(
        "max_operations_per_cluster", default.max_operations_per_cluster, low=1, high=1_000
    )
    if per_cluster > total:
        raise SettingsError(
            f"{node.path}.max_operations_per_cluster: {per_cluster} is more than max_operations ({total}); "
            "one cluster cannot run more operations than the whole instance"
        )
    in_flight = node.integer("max_evictions_in_flight", default.max_evictions_in_flight, low=2, high=1_024)
    cluster_ceiling = min(default.max_parallel_evictions, in_flight - 1)
    per_cluster_evictions = node.integer("max_evictions_per_cluster", cluster_ceiling, low=2, high=256)
    if per_cluster_evictions >= in_flight:
        raise SettingsError(
            f"{node.path}.max_evictions_per_cluster: {per_cluster_evictions} must be below "
            f"max_evictions_in_flight ({in_flight}), so a cluster whose evictions hang leaves room "
            "for the others"
        )
    return RunnerSettings(
        workloads_return_timeout=workloads_return_timeout,
        max_operations=total,
        max_operations_per_cluster=per_cluster,
        workers=node.integer("step_workers", default.workers, low=1, high=256),
        max_evictions_in_flight=in_flight,
        max_parallel_evictions=per_cluster_evictions,
        eviction_processes=node.integer("eviction_processes", default.eviction_processes, low=0, high=32),
    )


_CALENDAR_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")


def _calendars(node: DocumentNode, config_path: Path | None) -> dict[str, CalendarFile]:
    """Each `name: path` read and checked now: a bad file stops the start with what to fix."""
    base = config_path.parent if config_path is not None else Path(".")
    # The year its recurrences are checked around: the one the schedules start in.
    around = datetime.now(UTC).year
    found: dict[str, CalendarFile] = {}
    for name, child in node.items():
        if not _CALENDAR_NAME.fullmatch(name):
            raise SettingsError(
                f'{child.path}: calendar names are lowercase letters, digits, "-" or "_", e.g. releases'
            )
        written = node.string(name, "")
        if not written:
            raise SettingsError(f"{child.path}: give the path of an .ics file, e.g. /etc/scalebot/{name}.ics")
        path = Path(written).expanduser()
        try:
            found[name] = load_calendar(name, path if path.is_absolute() else base / path, around=around)
        except CalendarError as exc:
            raise SettingsError(f"{child.path}: {exc}") from None
    return found


def _read(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"{path}: cannot read the config file ({exc})") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise SettingsError(f"{path}: not valid YAML{where}: {getattr(exc, 'problem', exc)}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SettingsError(f"{path}: the config file must be a mapping of settings")
    return data


def _slack(env: Mapping[str, str], required: bool, node: DocumentNode) -> SlackSettings:
    node.only("allowed_team_ids", "allowed_enterprise_ids", "allowed_app_ids")
    allowed: dict[str, tuple[str, ...]] = {}
    for key, prefix, what in (
        ("allowed_team_ids", "T", "a workspace ID (T…)"),
        ("allowed_enterprise_ids", "E", "an enterprise ID (E…)"),
        ("allowed_app_ids", "A", "an app ID (A…)"),
    ):
        allowed[key] = node.strings(key)
        for index, value in enumerate(allowed[key]):
            if not re.fullmatch(prefix + r"[A-Z0-9]+", value):
                raise SettingsError(f"{node.path}.{key}[{index}]: '{value}' is not {what}")
    bot = env.get("SLACK_BOT_TOKEN", "").strip()
    secret = env.get("SLACK_SIGNING_SECRET", "").strip()
    app = env.get("SLACK_APP_TOKEN", "").strip()
    api_url = env.get("SLACK_API_URL", "").strip() or None
    if required and not bot:
        raise SettingsError("SLACK_BOT_TOKEN: not set; put the app's Bot User OAuth Token (xoxb-…) there")
    if bot and not bot.startswith("xoxb-"):
        raise SettingsError("SLACK_BOT_TOKEN: expected a bot token starting with xoxb-")
    if app and not app.startswith("xapp-"):
        raise SettingsError(
            "SLACK_APP_TOKEN: expected an app-level token starting with xapp- (connections:write)"
        )
    if required and not app and not secret:
        raise SettingsError(
            "SLACK_SIGNING_SECRET: not set; HTTP mode needs the app's signing secret "
            "(or set SLACK_APP_TOKEN for Socket Mode)"
        )
    if api_url is not None and not re.fullmatch(r"https?://[^\s]+/", api_url):
        raise SettingsError(f"SLACK_API_URL: '{api_url}' must be an http(s) URL ending with '/'")
    return SlackSettings(
        bot_token=Secret(bot),
        signing_secret=Secret(secret) if secret else None,
        app_token=Secret(app) if app else None,
        api_url=api_url,
        allowed_team_ids=allowed["allowed_team_ids"],
        allowed_enterprise_ids=allowed["allowed_enterprise_ids"],
        allowed_app_ids=allowed["allowed_app_ids"],
    )


def _server(node: DocumentNode) -> ServerSettings:
    node.only("host", "http_port", "health_port")
    return ServerSettings(
        host=node.string("host", "0.0.0.0"),
        http_port=node.integer("http_port", 3000, low=0, high=65535),
        health_port=node.integer("health_port", 8080, low=0, high=65535),
    )


def _currency(doc: DocumentNode) -> str | None:
    written = doc.string("currency", "")
    if not written:
        return None
    if not re.fullmatch(r"[A-Z]{3}", written):
        raise SettingsError(f"currency: {written[:20]!r} is not an ISO 4217 currency code (EUR, USD, GBP)")
    return written


def _digest_channel(doc: DocumentNode) -> str | None:
    written = doc.string("fleet_digest_channel", "")
    if not written:
        return None
    channel = channel_refs.channel_id(written)
    if channel is None:
        raise SettingsError(f"fleet_digest_channel: {written!r} is not a channel ID (C…)")
    return channel


def _sender(node: DocumentNode) -> SenderSettings:
    node.only("update_interval", "updates_per_minute", "posts_per_second", "posts_per_minute")
    interval = node.duration("update_interval", timedelta(seconds=3))
    per_minute = node.number("updates_per_minute", 40.0, low=1.0, high=50.0)
    return SenderSettings(
        update_interval=interval.total_seconds(),
        updates_per_minute=per_minute,
        posts_per_second=node.number("posts_per_second", 1.0, low=0.1, high=10.0),
        posts_per_minute=node.number("posts_per_minute", 120.0, low=10.0, high=600.0),
    )


def channel_names(settings: Settings) -> list[str]:
    """The `#name` channels of the config, which need Slack to become IDs."""
    written = [*settings.channels]
    for cluster in settings.clusters.values():
        written += [*cluster.default_channels, *sorted(cluster.policy.channels)]
        if cluster.savings_report is not None:
            written.append(cluster.savings_report.channel)
    return sorted({c for c in written if channel_refs.channel_name(c) is not None})


def with_channel_ids(settings: Settings, resolve: Callable[[str], str]) -> Settings:
    """`settings` with every `#name` replaced by the ID `resolve` finds (it raises ValueError with
    what to do, which becomes a SettingsError naming the channel)."""
    ids: dict[str, str] = {}
    for name in channel_names(settings):
        try:
            ids[name] = resolve(name)
        except ValueError as exc:
            raise SettingsError(f"channel {name} in the configuration: {exc}") from exc

    def one(channel: str) -> str:
        return ids.get(channel, channel)

    clusters = {
        name: replace(
            c,
            default_channels=tuple(dict.fromkeys(map(one, c.default_channels))),
            policy=replace(c.policy, channels=frozenset(map(one, c.policy.channels))),
            savings_report=c.savings_report
            and replace(c.savings_report, channel=one(c.savings_report.channel)),
        )
        for name, c in settings.clusters.items()
    }
    channels: dict[str, str] = {}
    for channel, cluster in settings.channels.items():
        if channels.get(one(channel), cluster) != cluster:
            raise SettingsError(
                f"channel {channel} is the default channel of two clusters; a channel has one"
            )
        channels[one(channel)] = cluster
    check_channel_separation(clusters, channels)  # names now IDs: compared as they will be used
    return replace(settings, clusters=clusters, channels=channels)


def _channels(doc: DocumentNode, clusters: Mapping[str, ClusterSettings]) -> dict[str, str]:
    mapping: dict[str, str] = {}
    for cluster in clusters.values():
        for channel in cluster.default_channels:
            if channel in mapping and mapping[channel] != cluster.name:
                raise SettingsError(
                    f"clusters.{cluster.name}.default_channels: {channel} is already the default channel "
                    f"of {mapping[channel]}; a channel has one default cluster"
                )
            mapping[channel] = cluster.name
    for written, child in doc.child("channels").items():
        channel = channel_ref(written, child.path)
        if child.value not in clusters:
            known = ", ".join(sorted(clusters)) or "none configured"
            raise SettingsError(f"{child.path}: unknown cluster '{child.value}' ({known})")
        mapping[channel] = str(child.value)
    return mapping
