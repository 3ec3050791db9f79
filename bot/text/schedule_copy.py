"""What the bot says when `/scale schedule …` is typed wrong, and the schedule modals' field IDs.

Pure text, shared by the parser (`bot.text.schedule_parser`), which raises these sentences, and the
Slack side (`bot.slack.blocks.schedules` builds the modals with these block IDs, `bot.slack.schedule_ui`
routes the verbs), so neither side reaches into the other. In the style of `bot.text.messages`.
"""

from __future__ import annotations

from bot.text import messages

POSTPONE_DATE, POSTPONE_TIME = "until_date", "until_time"
ADD_FIELDS = (
    "name",
    "cluster",
    "sleep_days",
    "sleep_time",
    "wake_days",
    "wake_time",
    "tz",
    "lead",
    "channel",
    "approval",
    "pools",
    "workloads",
    "except",
    "holidays",
    "calendar",
    "on_holiday",
)
"""Block IDs of the add modal's inputs (each block's element uses the same action ID)."""

USAGE: dict[str, str] = {
    "add": (
        "schedule add NAME sleep=DAYS HH:MM wake=DAYS HH:MM tz=ZONE [lead=60m,10m] [#channel] "
        "[approval=pre|per-run] [pools=a,b [size=N]] [workloads=yes|only] [except=YYYY-MM-DD,…] "
        "[holidays=DE-BY] [calendar=NAME] [on-holiday=stay-asleep|skip-wake|skip-sleep] [cluster=NAME]"
    ),
    "list": "schedule list [CLUSTER]",
    "show": "schedule show NAME",
    "pause": "schedule pause NAME",
    "resume": "schedule resume NAME",
    "delete": "schedule delete NAME",
    "approve": "schedule approve NAME",
    "unapprove": "schedule unapprove NAME",
    "next": "schedule next [CLUSTER]",
    "skip": "schedule skip NAME YYYY-MM-DD",
    "force": "schedule force NAME --force-scope=Kind/namespace/name,…|none",
}
"""Usage per `schedule` verb, without the leading command."""


def usage(verb: str | None = None) -> str:
    if verb in USAGE:
        return f"{messages.COMMAND} {USAGE[verb]}"
    return (
        f"{messages.COMMAND} schedule add|list|show|pause|resume|delete|approve|unapprove|next|skip|force …"
    )


def unknown_verb(word: str, suggestion: str | None) -> str:
    hint = f" Did you mean `schedule {suggestion}`?" if suggestion else ""
    return f"`schedule` has no subcommand `{word}`.{hint}"


def missing_name(verb: str) -> str:
    return f"Missing the schedule name: `{usage(verb)}`."


def missing_option(key: str, example: str) -> str:
    return f"Missing `{key}=`: {example}."


def unknown_option(key: str, suggestion: str | None) -> str:
    hint = f" Did you mean `{suggestion}=`?" if suggestion else ""
    return f"`schedule add` has no option `{key}=`.{hint}"


def unknown_flag(flag: str) -> str:
    return f"`schedule` has no flag `--{flag}`; options are written `key=value`."


def given_twice(key: str) -> str:
    return f"`{key}=` is given twice; give it once."


def bad_approval(value: str) -> str:
    return (
        f"`approval={value}` is not an approval mode: use `approval=pre` (you, an approver, approve every "
        "run now) or `approval=per-run` (an approver approves each sleep when it starts)."
    )


def channel_by_name(value: str) -> str:
    return (
        f"`channel={value}` is not a channel: write `channel=#name`, type `#` and pick the channel as its "
        "own word (Slack then sends a link), or leave it out to use this channel."
    )


def channel_name_needs_slack(value: str) -> str:
    return (
        f"`channel={value}`: a channel name is looked up in Slack, which is not here; "
        "give the channel's ID (C…)."
    )


def bad_size(value: str) -> str:
    return f"`size={value}` is not a pool size: use a whole number from 0 to 10000, with exactly one pool."


def size_needs_one_pool() -> str:
    return "`size=` scales one pool: give exactly one pool, e.g. `pools=web size=1`."


def bad_workloads(value: str) -> str:
    return (
        f"`workloads={value}` is not a choice: `yes` scales the workloads to zero before the pools "
        "(the wake restores them), `only` sleeps the workloads alone, `no` leaves them running."
    )


def workloads_only_takes_no_pools() -> str:
    return "`workloads=only` changes no node pool: drop `pools=` and `size=`, or use `workloads=yes`."


def workloads_need_zero() -> str:
    return "`workloads=yes` goes with pools scaled to 0: drop `size=`, or the workloads option."
