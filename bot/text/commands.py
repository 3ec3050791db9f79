"""The `/scale` command language: text in, a `Command` value out, or a `UsageError`.

Pure: no I/O, no clock, no Slack. Runs on Bolt's listener thread before `ack()`, so a usage error
becomes the ephemeral ack body and bad input never reaches the engine. The only exception that
leaves `parse` is `UsageError` (a property test holds it to that).

Grammar: tokens separated by whitespace; `cluster=NAME`, `--cluster NAME` and `--cluster=NAME`
are the same option. The subcommands, their aliases, usage lines, options and flags are
`bot.text.command_registry`'s (one table for Slack, the console, the CLI and the docs); this module
turns the tokens of each into its typed `Command` (`schedule …` is kept generic for its owner:
`SubcommandArgs`), and `subcommand_of` names the registry entry of a parsed command.
Names are Kubernetes DNS-1123 names. Anything that looks like a selector or shell syntax
(`;`, `$(`, backticks, `|`, `&&`, `,` …) is refused with the offending token named, because
scalebot never passes text to a shell or a selector and a person typing one expects it to work.
"""

from __future__ import annotations

import difflib
import html
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta

from bot.text import command_registry, messages
from engine.domain.durations import DurationError, MissingUnitError, parse_duration
from engine.domain.errors import Category, ScalebotError
from engine.domain.operation import OperationRequest, OpKind, Target

MAX_TEXT_CHARS = 2_000
MAX_POOL_SIZE = 10_000
MAX_WAKE_FOR = timedelta(days=7)

SUBCOMMANDS: tuple[str, ...] = tuple(command_registry.SLACK)
_ALIASES = command_registry.ALIASES

_DNS1123 = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_NAME_LIMITS = {"node": 253, "pool": 253, "cluster": 63}
_OP_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
_SIZE = re.compile(r"[0-9]{1,5}")
"""ASCII digits only: `int()` and `\\d` also take other scripts' digits (a fullwidth three)."""
_OPTION_KEY = re.compile(r"[a-z][a-z0-9_-]{0,31}")
_LOOSE = re.compile(r"[\w:/.+@,#-]{1,200}")
"""Schedule arguments (times, weekdays, time zones, lead times): wider than names, still no shell."""
_INJECTION = (
    ";",
    "$(",
    "`",
    "|",
    "&&",
    ",",
    "&",
    "$",
    ">",
    "<",
    "*",
    "(",
    ")",
    "{",
    "}",
    "\\",
    "'",
    '"',
    "!",
)
_SLACK_ESCAPE = re.compile(r"<([@#!][^<>\s|]*)(?:\|[^<>]*)?>")
_USER_MENTION = re.compile(r"<@([UW][A-Z0-9]{1,20})>")
_CHANNEL_MENTION = re.compile(r"<#(C[A-Z0-9]{1,20})>")


class UsageError(ScalebotError, ValueError):
    """Bad command text: `message` names the problem, `hint` shows the right form."""

    category = Category.USAGE

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint or messages.usage("help")


# -- commands ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Help:
    topic: str | None = None


@dataclass(frozen=True, slots=True)
class Status:
    cluster: str | None = None


@dataclass(frozen=True, slots=True)
class Whoami:
    cluster: str | None = None
    user: str | None = None
    """Someone else's Slack user ID when the person asked about a colleague."""


@dataclass(frozen=True, slots=True)
class Request:
    """drain / scale / zero / wake, or `plan …` of one of them (`plan_only`)."""

    kind: OpKind
    target: Target
    plan_only: bool = False

    def to_operation_request(self, *, user: str, channel: str, thread_ts: str = "") -> OperationRequest:
        return OperationRequest(
            kind=self.kind, target=self.target, requested_by=user, channel=channel, thread_ts=thread_ts
        )


@dataclass(frozen=True, slots=True)
class Cordon:
    cluster: str
    nodes: tuple[str, ...]
    unschedulable: bool


@dataclass(frozen=True, slots=True)
class OpsList:
    cluster: str | None = None
    active_only: bool = False


@dataclass(frozen=True, slots=True)
class OpsShow:
    op_id: str


@dataclass(frozen=True, slots=True)
class OpsCancel:
    op_id: str


@dataclass(frozen=True, slots=True)
class SubcommandArgs:
    """A subcommand parsed only into tokens, for a handler that owns its grammar (`schedule`)."""

    name: str
    args: tuple[str, ...] = ()
    """Positional tokens in order; mentions normalised to `<@U…>` / `<#C…>`."""
    options: tuple[tuple[str, str], ...] = ()
    flags: frozenset[str] = frozenset()

    def option(self, key: str, default: str | None = None) -> str | None:
        return dict(self.options).get(key, default)


@dataclass(frozen=True, slots=True)
class Advise:
    cluster: str


Command = Help | Status | Whoami | Request | Cordon | OpsList | OpsShow | OpsCancel | Advise | SubcommandArgs


def subcommand_of(command: Command) -> str:
    """The `/scale` subcommand a parsed command came from: its `command_registry` entry."""
    match command:
        case Help():
            return "help"
        case Status():
            return "status"
        case Whoami():
            return "whoami"
        case Request():
            return "plan" if command.plan_only else command.kind.value
        case Cordon():
            return "cordon" if command.unschedulable else "uncordon"
        case Advise():
            return "advise"
        case OpsList() | OpsShow() | OpsCancel():
            return "ops"
        case SubcommandArgs():
            return command.name


# -- tokens --------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Tokens:
    sub: str
    positional: list[str] = field(default_factory=list)
    options: dict[str, str] = field(default_factory=dict)
    flags: set[str] = field(default_factory=set)
    mentions: list[str] = field(default_factory=list)


_VALUE_OPTIONS: dict[str, frozenset[str]] = {n: spec.options for n, spec in command_registry.SLACK.items()}
_FLAGS: dict[str, frozenset[str]] = {n: spec.flags for n, spec in command_registry.SLACK.items()}


def parse(text: str, *, default_cluster: str | None, clusters: Collection[str] = ()) -> Command:
    """Parse `/scale` text. `clusters` (the configured names) lets `zero dev-eu` tell a cluster
    from a pool and lets unknown clusters be refused here, listing the valid ones."""
    if len(text) > MAX_TEXT_CHARS:
        raise UsageError(messages.too_long(len(text), MAX_TEXT_CHARS))
    words = _words(text)
    if not words:
        raise UsageError(messages.empty_command())
    sub = _subcommand(words[0])
    if sub == "schedule":
        return _generic(sub, words[1:])
    if sub == "plan":
        return _plan(words[1:], default_cluster=default_cluster, clusters=clusters)
    tokens = _split(sub, words[1:])
    return _build(tokens, default_cluster=default_cluster, clusters=tuple(clusters))


def _words(text: str) -> list[str]:
    # Slack escapes mentions as <@U123|name> (the label may hold spaces): drop labels first.
    cleaned = _SLACK_ESCAPE.sub(lambda m: f"<{m.group(1)}>", text)
    return cleaned.split()


def _subcommand(word: str) -> str:
    lowered = word.lower()
    lowered = _ALIASES.get(lowered, lowered)
    if lowered in SUBCOMMANDS:
        return lowered
    if any(marker in word for marker in _INJECTION):
        raise UsageError(messages.looks_like_injection(word))
    close = difflib.get_close_matches(lowered, SUBCOMMANDS, n=1, cutoff=0.6)
    raise UsageError(messages.unknown_subcommand(word[:80], close[0] if close else None))


def _unescape(token: str) -> str:
    """Slack sends &, < and > as HTML entities in command text."""
    return html.unescape(token) if "&" in token else token


def _split(sub: str, words: Sequence[str]) -> _Tokens:
    tokens = _Tokens(sub=sub)
    value_options = _VALUE_OPTIONS.get(sub, frozenset())
    flags = _FLAGS.get(sub, frozenset())
    index = 0
    while index < len(words):
        word = words[index]
        index += 1
        mention = _USER_MENTION.fullmatch(word)
        if mention:
            tokens.mentions.append(mention.group(1))
            continue
        if _SLACK_ESCAPE.fullmatch(word):  # a channel or group mention: never an argument here
            raise UsageError(messages.mention_not_allowed(word[:80]), messages.usage(sub))
        word = _unescape(word)
        if word.startswith("--"):
            key, has_value, value = word[2:].partition("=")
            key = key.lower()
            if key in flags and not has_value:
                tokens.flags.add(key)
            elif key in value_options:
                if not has_value:
                    if index >= len(words):
                        raise UsageError(messages.missing_value(f"--{key}"), messages.usage(sub))
                    value = _unescape(words[index])
                    index += 1
                tokens.options[key] = value
            else:
                raise _unknown_option(word, sub, value_options | flags, prefix="--")
        elif word.startswith("-") and not _SIZE.fullmatch(word[1:]):
            raise _unknown_option(word, sub, value_options | flags, prefix="--")
        elif "=" in word and _OPTION_KEY.fullmatch(word.partition("=")[0].lower()):
            key, _, value = word.partition("=")
            if key.lower() not in value_options:
                raise _unknown_option(word, sub, value_options, prefix="")
            tokens.options[key.lower()] = value
        else:
            tokens.positional.append(word)
    return tokens


def _unknown_option(word: str, sub: str, known: Collection[str], *, prefix: str) -> UsageError:
    name = word.partition("=")[0]
    if any(marker in word for marker in (";", "$(", "`", "|", "&&")):
        return UsageError(messages.looks_like_injection(word), messages.usage(sub))
    bare = name.lstrip("-").lower()
    close = difflib.get_close_matches(bare, sorted(known), n=1, cutoff=0.6)
    suggestion = f"{prefix}{close[0]}" if close else None
    return UsageError(messages.unknown_option(name[:80], sub, suggestion), messages.usage(sub))


def _name(token: str, what: str, sub: str) -> str:
    limit = _NAME_LIMITS[what]
    if len(token) <= limit and _DNS1123.fullmatch(token):
        return token
    if any(marker in token for marker in _INJECTION):
        raise UsageError(messages.looks_like_injection(token[:100]), messages.usage(sub))
    raise UsageError(messages.bad_name(token[:100], what), messages.usage(sub))


# -- subcommands ---------------------------------------------------------------------------------


def _build(tokens: _Tokens, *, default_cluster: str | None, clusters: Sequence[str]) -> Command:
    sub = tokens.sub
    if tokens.mentions and sub != "whoami":
        raise UsageError(messages.mention_not_allowed(f"<@{tokens.mentions[0]}>"), messages.usage(sub))
    if sub == "help":
        return _help(tokens)
    if sub in ("status", "whoami"):
        return _status_or_whoami(tokens, default_cluster, clusters)
    if sub in ("drain", "cordon", "uncordon"):
        return _nodes(tokens, default_cluster, clusters)
    if sub == "scale":
        return _scale(tokens, default_cluster, clusters)
    if sub in ("zero", "wake"):
        return _zero_or_wake(tokens, default_cluster, clusters)
    if sub == "consolidate":
        return _consolidate(tokens, default_cluster, clusters)
    if sub == "advise":
        if len(tokens.positional) > 1:
            raise UsageError(messages.unexpected_arguments(tokens.positional[1:]), messages.usage("advise"))
        cluster = (
            _cluster(tokens, clusters, tokens.positional[0] if tokens.positional else None) or default_cluster
        )
        if cluster is None:
            raise UsageError(messages.no_cluster(sorted(clusters)), messages.usage("advise"))
        return Advise(cluster)
    return _ops(tokens, clusters)


def _help(tokens: _Tokens) -> Help:
    if len(tokens.positional) > 1:
        raise UsageError(messages.unexpected_arguments(tokens.positional[1:]), messages.usage("help"))
    if not tokens.positional:
        return Help()
    return Help(topic=_subcommand(tokens.positional[0]))


def _cluster(tokens: _Tokens, clusters: Sequence[str], positional: str | None = None) -> str | None:
    given = tokens.options.get("cluster", positional)
    if positional is not None and given != positional:
        raise UsageError(messages.unexpected_arguments([positional]), messages.usage(tokens.sub))
    if given is None:
        return None
    name = _name(given, "cluster", tokens.sub)
    if clusters and name not in clusters:
        raise UsageError(messages.unknown_cluster(name, sorted(clusters)), messages.usage(tokens.sub))
    return name


def _required_cluster(tokens: _Tokens, default: str | None, clusters: Sequence[str]) -> str:
    cluster = _cluster(tokens, clusters) or default
    if cluster is None:
        raise UsageError(messages.no_cluster(sorted(clusters)), messages.usage(tokens.sub))
    return cluster


def _status_or_whoami(tokens: _Tokens, default: str | None, clusters: Sequence[str]) -> Status | Whoami:
    if len(tokens.positional) > 1 or len(tokens.mentions) > 1:
        extra = tokens.positional[1:] or [f"<@{m}>" for m in tokens.mentions[1:]]
        raise UsageError(messages.unexpected_arguments(extra), messages.usage(tokens.sub))
    cluster = _cluster(tokens, clusters, tokens.positional[0] if tokens.positional else None)
    if tokens.sub == "status":
        return Status(cluster=cluster or default)
    return Whoami(cluster=cluster, user=tokens.mentions[0] if tokens.mentions else None)


def _nodes(tokens: _Tokens, default: str | None, clusters: Sequence[str]) -> Request | Cordon:
    if not tokens.positional:
        raise UsageError(messages.missing_argument("node names"), messages.usage(tokens.sub))
    nodes = tuple(dict.fromkeys(_name(t, "node", tokens.sub) for t in tokens.positional))
    cluster = _required_cluster(tokens, default, clusters)
    if tokens.sub == "drain":
        target = Target(
            cluster=cluster,
            nodes=nodes,
            force="force" in tokens.flags,
            disable_eviction="disable-eviction" in tokens.flags,
        )
        return Request(kind=OpKind.DRAIN, target=target)
    return Cordon(cluster=cluster, nodes=nodes, unschedulable=tokens.sub == "cordon")


def _scale(tokens: _Tokens, default: str | None, clusters: Sequence[str]) -> Request:
    words = [w for w in tokens.positional if w.lower() != "to"]
    if "pool" in tokens.options:
        words.insert(0, tokens.options["pool"])
    if len(words) < 2:
        raise UsageError(messages.missing_argument("a pool and a size"), messages.usage("scale"))
    if len(words) > 2:
        raise UsageError(messages.unexpected_arguments(words[2:]), messages.usage("scale"))
    pool = _name(words[0], "pool", "scale")
    if not is_size(words[1]):
        raise UsageError(messages.bad_size(words[1][:40]), messages.usage("scale"))
    cluster = _required_cluster(tokens, default, clusters)
    target = Target(cluster=cluster, pools=(pool,), size=int(words[1]), one_at_a_time=_one_at_a_time(tokens))
    return Request(kind=OpKind.SCALE, target=target)


def is_size(word: str) -> bool:
    """A pool size as typed: 0 to MAX_POOL_SIZE in ASCII digits (never another script's digits)."""
    return bool(_SIZE.fullmatch(word)) and int(word) <= MAX_POOL_SIZE


def _one_at_a_time(tokens: _Tokens) -> bool | None:
    """`--one-at-a-time` asks for it; without it the cluster's policy decides (None)."""
    return True if "one-at-a-time" in tokens.flags else None


def _zero_or_wake(tokens: _Tokens, default: str | None, clusters: Sequence[str]) -> Request:
    words = list(tokens.positional)
    wake_for = tokens.options.get("for")
    lowered = [w.lower() for w in words]
    if "for" in lowered:
        at = lowered.index("for")
        if tokens.sub != "wake":
            raise UsageError(messages.unexpected_arguments(words[at:]), messages.usage(tokens.sub))
        if at + 1 >= len(words):
            raise UsageError(messages.missing_value("for"), messages.usage(tokens.sub))
        wake_for = words[at + 1]
        del words[at : at + 2]
    explicit = _cluster(tokens, clusters)
    cluster: str | None = explicit
    if explicit is None and words and _is_cluster_word(words[0], clusters, default, len(words)):
        cluster = _cluster(tokens, clusters, words.pop(0))
    cluster = cluster or default
    if cluster is None:
        raise UsageError(messages.no_cluster(sorted(clusters)), messages.usage(tokens.sub))
    pools = tuple(dict.fromkeys(_name(w, "pool", tokens.sub) for w in words))
    target = Target(
        cluster=cluster,
        pools=pools,
        force="force" in tokens.flags,
        workloads="workloads" in tokens.flags,
        one_at_a_time=_one_at_a_time(tokens) if tokens.sub == "zero" else None,
        wake_for_seconds=_wake_for(wake_for) if wake_for is not None else None,
    )
    return Request(kind=OpKind.ZERO if tokens.sub == "zero" else OpKind.WAKE, target=target)


def _consolidate(tokens: _Tokens, default: str | None, clusters: Sequence[str]) -> Request:
    words = list(tokens.positional)
    cluster = _cluster(tokens, clusters)
    if cluster is None and words and _is_cluster_word(words[0], clusters, default, len(words)):
        cluster = _cluster(tokens, clusters, words.pop(0))
    cluster = cluster or default
    if cluster is None:
        raise UsageError(messages.no_cluster(sorted(clusters)), messages.usage("consolidate"))
    pools = tuple(dict.fromkeys(_name(w, "pool", "consolidate") for w in words))
    return Request(kind=OpKind.CONSOLIDATE, target=Target(cluster=cluster, pools=pools))


def _is_cluster_word(word: str, clusters: Sequence[str], default: str | None, count: int) -> bool:
    if clusters:
        return word in clusters
    # Without the configured names: a lone word with no channel default can only be a cluster.
    return default is None and count == 1


def _wake_for(token: str) -> int:
    if len(token) > 20:
        raise UsageError(messages.bad_duration(token[:40]), messages.usage("wake"))
    try:
        duration = parse_duration(token)
    except MissingUnitError as exc:
        raise UsageError(messages.bad_duration(token, str(exc)), messages.usage("wake")) from exc
    except (DurationError, OverflowError, ValueError) as exc:
        raise UsageError(messages.bad_duration(token), messages.usage("wake")) from exc
    if duration <= timedelta(0) or duration > MAX_WAKE_FOR:
        raise UsageError(messages.bad_duration(token), messages.usage("wake"))
    return int(duration.total_seconds())


def _ops(tokens: _Tokens, clusters: Sequence[str]) -> OpsList | OpsShow | OpsCancel:
    words = tokens.positional
    action = words[0].lower() if words else "list"
    if action == "list":
        if len(words) > 2:
            raise UsageError(messages.unexpected_arguments(words[2:]), messages.usage("ops"))
        cluster = _cluster(tokens, clusters, words[1] if len(words) == 2 else None)
        return OpsList(cluster=cluster, active_only="active" in tokens.flags)
    if action in ("show", "cancel"):
        if len(words) != 2:
            raise UsageError(messages.missing_argument("one operation ID"), messages.usage("ops"))
        if not _OP_ID.fullmatch(words[1]):
            if any(marker in words[1] for marker in _INJECTION):
                raise UsageError(messages.looks_like_injection(words[1][:100]), messages.usage("ops"))
            raise UsageError(messages.bad_operation_id(words[1][:100]), messages.usage("ops"))
        return OpsShow(words[1]) if action == "show" else OpsCancel(words[1])
    close = difflib.get_close_matches(action, ("list", "show", "cancel"), n=1, cutoff=0.6)
    suggestion = f"ops {close[0]}" if close else None
    raise UsageError(messages.unknown_subcommand(f"ops {words[0][:80]}", suggestion), messages.usage("ops"))


def _plan(words: Sequence[str], *, default_cluster: str | None, clusters: Collection[str]) -> Request:
    if not words:
        raise UsageError(messages.plan_needs_kind(), messages.usage("plan"))
    kind = words[0].lower()
    kinds = ("zero", "wake", "scale", "drain", "consolidate")
    if kind not in kinds:
        close = difflib.get_close_matches(kind, kinds, n=1, cutoff=0.6)
        hint = messages.unknown_subcommand(f"plan {words[0][:80]}", f"plan {close[0]}" if close else None)
        raise UsageError(f"{messages.plan_needs_kind()} {hint}", messages.usage("plan"))
    command = _build(_split(kind, words[1:]), default_cluster=default_cluster, clusters=tuple(clusters))
    assert isinstance(command, Request)  # zero/wake/scale/drain/consolidate always build a Request
    return replace(command, plan_only=True)


def _generic(sub: str, words: Sequence[str]) -> SubcommandArgs:
    args: list[str] = []
    options: list[tuple[str, str]] = []
    flags: set[str] = set()
    for raw in words:
        if _USER_MENTION.fullmatch(raw) or _CHANNEL_MENTION.fullmatch(raw):
            args.append(raw)
            continue
        word = _unescape(raw)
        if word.startswith("--") and _OPTION_KEY.fullmatch(word[2:].partition("=")[0].lower()):
            key, has_value, value = word[2:].partition("=")
            if has_value:
                options.append((key.lower(), _loose(value, sub)))
            else:
                flags.add(key.lower())
        elif "=" in word and _OPTION_KEY.fullmatch(word.partition("=")[0].lower()):
            key, _, value = word.partition("=")
            options.append((key.lower(), _loose(value, sub)))
        else:
            args.append(_loose(word, sub))
    return SubcommandArgs(name=sub, args=tuple(args), options=tuple(options), flags=frozenset(flags))


def _loose(token: str, sub: str) -> str:
    if _LOOSE.fullmatch(token) and not any(marker in token for marker in (";", "$(", "`", "|", "&&")):
        return token
    if any(marker in token for marker in _INJECTION):
        raise UsageError(messages.looks_like_injection(token[:100]), messages.usage(sub))
    raise UsageError(messages.bad_token(token[:100]), messages.usage(sub))
