"""The /scale parser: every subcommand's forms, the errors people will hit, hostile input.

Covers: each subcommand and option spelling; cluster vs pool disambiguation; channel defaults;
escaped mentions and HTML entities; did-you-mean; names that look like selectors or shell
injection are refused naming the token; oversize text; and a property: whatever the text,
`parse` returns a Command or raises UsageError, nothing else.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.text import commands
from bot.text.commands import (
    Cordon,
    Help,
    OpsCancel,
    OpsList,
    OpsShow,
    Request,
    Status,
    SubcommandArgs,
    UsageError,
    Whoami,
    parse,
)
from engine.domain.operation import OpKind, Target

CLUSTERS = ("dev-eu", "prod")


def p(text: str, default: str | None = "dev-eu") -> commands.Command:
    return parse(text, default_cluster=default, clusters=CLUSTERS)


def err(text: str, default: str | None = "dev-eu") -> UsageError:
    with pytest.raises(UsageError) as info:
        p(text, default)
    return info.value


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("help", Help()),
        ("HELP zero", Help(topic="zero")),
        ("status", Status(cluster="dev-eu")),
        ("status prod", Status(cluster="prod")),
        ("status --cluster=prod", Status(cluster="prod")),
        ("whoami", Whoami()),
        ("whoami prod <@U0AB12|alice>", Whoami(cluster="prod", user="U0AB12")),
        ("drain web-1 web-2", Request(OpKind.DRAIN, Target(cluster="dev-eu", nodes=("web-1", "web-2")))),
        (
            "drain ip-10-0-0-1.ec2.internal --force cluster=prod",
            Request(OpKind.DRAIN, Target(cluster="prod", nodes=("ip-10-0-0-1.ec2.internal",), force=True)),
        ),
        ("cordon web-1", Cordon("dev-eu", ("web-1",), unschedulable=True)),
        ("uncordon web-1 web-1", Cordon("dev-eu", ("web-1",), unschedulable=False)),
        ("scale web 3", Request(OpKind.SCALE, Target(cluster="dev-eu", pools=("web",), size=3))),
        ("scale web to 0", Request(OpKind.SCALE, Target(cluster="dev-eu", pools=("web",), size=0))),
        (
            "scale pool=web to 2 --cluster prod",
            Request(OpKind.SCALE, Target(cluster="prod", pools=("web",), size=2)),
        ),
        ("zero", Request(OpKind.ZERO, Target(cluster="dev-eu"))),
        ("zero prod", Request(OpKind.ZERO, Target(cluster="prod"))),
        (
            "zero web batch --workloads",
            Request(OpKind.ZERO, Target(cluster="dev-eu", pools=("web", "batch"), workloads=True)),
        ),
        ("wake prod for 3h", Request(OpKind.WAKE, Target(cluster="prod", wake_for_seconds=10800))),
        ("wake --for=90m", Request(OpKind.WAKE, Target(cluster="dev-eu", wake_for_seconds=5400))),
        ("plan zero prod", Request(OpKind.ZERO, Target(cluster="prod"), plan_only=True)),
        (
            "plan drain web-1",
            Request(OpKind.DRAIN, Target(cluster="dev-eu", nodes=("web-1",)), plan_only=True),
        ),
        ("consolidate", Request(OpKind.CONSOLIDATE, Target(cluster="dev-eu"))),
        ("consolidate prod", Request(OpKind.CONSOLIDATE, Target(cluster="prod"))),
        (
            "consolidate web batch",
            Request(OpKind.CONSOLIDATE, Target(cluster="dev-eu", pools=("web", "batch"))),
        ),
        ("advise", commands.Advise("dev-eu")),
        ("advise prod", commands.Advise("prod")),
        ("plan consolidate prod", Request(OpKind.CONSOLIDATE, Target(cluster="prod"), plan_only=True)),
        ("ops", OpsList()),
        ("ops list prod --active", OpsList(cluster="prod", active_only=True)),
        ("operations show op-1a2b3c4d", OpsShow("op-1a2b3c4d")),
        ("ops cancel op-1a2b3c4d", OpsCancel("op-1a2b3c4d")),
    ],
)
def test_valid_commands(text: str, expected: commands.Command) -> None:
    assert p(text) == expected


def test_schedule_is_parsed_generically_for_its_owner() -> None:
    parsed = p(
        "schedule add nightly zero dev-eu Mon-Fri 20:00 until 07:00 tz=Europe/Berlin --paused <#C0DEV|ops>"
    )

    assert parsed == SubcommandArgs(
        name="schedule",
        args=("add", "nightly", "zero", "dev-eu", "Mon-Fri", "20:00", "until", "07:00", "<#C0DEV>"),
        options=(("tz", "Europe/Berlin"),),
        flags=frozenset({"paused"}),
    )
    assert parsed.option("tz") == "Europe/Berlin"


def test_request_becomes_an_operation_request() -> None:
    parsed = p("zero prod")
    assert isinstance(parsed, Request)
    req = parsed.to_operation_request(user="U1", channel="C1")
    assert (req.kind, req.target.cluster, req.requested_by, req.channel) == (OpKind.ZERO, "prod", "U1", "C1")


def test_a_lone_word_is_a_cluster_when_nothing_else_says_so() -> None:
    assert parse("zero dev-eu", default_cluster=None) == Request(OpKind.ZERO, Target(cluster="dev-eu"))
    assert parse("zero web", default_cluster="dev-eu") == Request(
        OpKind.ZERO, Target(cluster="dev-eu", pools=("web",))
    )


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("stauts", "Did you mean `status`?"),
        ("drian web-1", "Did you mean `drain`?"),
        ("ops lsit", "Did you mean `ops list`?"),
        ("plan zreo", "Did you mean `plan zero`?"),
        ("drain web-1 --froce", "Did you mean `--force`?"),
        ("frobnicate", "I don't know the subcommand `frobnicate`."),
    ],
)
def test_did_you_mean(text: str, fragment: str) -> None:
    assert fragment in err(text).message


@pytest.mark.parametrize(
    ("text", "token"),
    [
        ("drain web-1;reboot", "web-1;reboot"),
        ("drain $(reboot)", "$(reboot)"),
        ("drain `id`", "`id`"),
        ("drain web-1|sh", "web-1|sh"),
        ("drain a&amp;&amp;b", "a&&b"),
        ("drain web-1,web-2", "web-1,web-2"),
        ("zero web;ls", "web;ls"),
        ("scale web* 0", "web*"),
        ("status dev-eu&amp;&amp;rm", "dev-eu&&rm"),
        ("ops show op-1;id", "op-1;id"),
        ("drain app=web", "app"),
        ("drain -l role=web", "-l"),
        ("schedule add x;rm", "x;rm"),
    ],
)
def test_selectors_and_shell_syntax_are_refused_naming_the_token(text: str, token: str) -> None:
    error = err(text)
    assert f"`{token}`" in error.message


def test_errors_carry_the_usage_of_the_subcommand() -> None:
    error = err("scale web")
    assert "pool and a size" in error.message
    assert error.hint == "/scale scale POOL N [cluster=NAME] [--one-at-a-time]"


def test_one_at_a_time_is_asked_for_or_left_to_the_policy() -> None:
    def pace(text: str) -> bool | None:
        command = p(text)
        assert isinstance(command, Request)
        return command.target.one_at_a_time

    assert pace("scale web 2 --one-at-a-time") is True
    assert pace("zero web --one-at-a-time") is True
    assert pace("zero web") is None
    assert pace("wake web") is None
    assert "one-at-a-time" in err("wake web --one-at-a-time").message


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "Tell me what to do"),
        ("   ", "Tell me what to do"),
        ("drain", "node names"),
        ("scale web lots", "not a pool size"),
        ("scale web 100000", "not a pool size"),
        ("scale web -1", "not a pool size"),
        ("wake for", "needs a value"),
        ("wake for soon", "not a duration"),
        ("wake for 30d", "not a duration"),
        ("zero web for 3h", "Unexpected arguments"),
        ("zero cluster=staging", "Unknown cluster `staging`; clusters: dev-eu, prod"),
        ("drain Web-1", "not a valid node name"),
        ("drain " + "a" * 254, "not a valid node name"),
        ("status <@U0AB12>", "A mention"),
        ("drain web-1 <@U0AB12>", "A mention"),
        ("drain web-1 <#C0DEV|ops>", "A mention"),
        ("ops show", "one operation ID"),
        ("plan", "needs what to plan"),
        ("plan status", "needs what to plan"),
        ("status dev-eu cluster=prod", "Unexpected argument"),
    ],
)
def test_bad_input_is_named(text: str, fragment: str) -> None:
    assert fragment in err(text).message


def test_no_cluster_anywhere_asks_which_one() -> None:
    assert "Which cluster?" in err("scale web 1", default=None).message


def test_oversize_text_is_refused() -> None:
    assert "2,000" in err("drain " + "n " * 1500).message


def test_unicode_and_control_characters_are_refused_cleanly() -> None:
    assert "not a valid node name" in err("drain nœud-1").message
    assert "`sta\x00tus`" in err("sta\x00tus").message or "looks like" in err("sta\x00tus").message


_VOCABULARY = st.sampled_from(
    [
        "help",
        "status",
        "plan",
        "drain",
        "cordon",
        "uncordon",
        "scale",
        "zero",
        "wake",
        "ops",
        "list",
        "show",
        "cancel",
        "schedule",
        "whoami",
        "to",
        "for",
        "3h",
        "0",
        "-1",
        "99999",
        "web",
        "dev-eu",
        "prod",
        "op-1",
        "--force",
        "--workloads",
        "--active",
        "--cluster",
        "cluster=",
        "cluster=prod",
        "pool=web",
        "<@U1|x>",
        "<#C1>",
        "&amp;&amp;",
        "$(",
        ";",
        "|",
        "`",
        ",",
        "=",
        "-l",
        "for=2h",
        "ø",
        "\x00",
        "",
    ]
)


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=300))
def test_arbitrary_text_only_ever_raises_usage_error(text: str) -> None:
    try:
        parse(text, default_cluster=None)
        parse(text, default_cluster="dev-eu", clusters=CLUSTERS)
    except UsageError as error:
        assert error.message and error.hint


@settings(max_examples=600, deadline=None)
@given(st.lists(_VOCABULARY, max_size=8), st.sampled_from([None, "dev-eu"]))
def test_plausible_token_soup_only_ever_raises_usage_error(words: list[str], default: str | None) -> None:
    try:
        result = parse(" ".join(words), default_cluster=default, clusters=CLUSTERS)
    except UsageError as error:
        assert error.message and error.hint
    else:
        assert isinstance(
            result, Help | Status | Whoami | Request | Cordon | OpsList | OpsShow | OpsCancel | SubcommandArgs
        )
