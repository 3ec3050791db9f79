"""Every command scalebot answers, in one table: its name, how it is typed, what it does, examples,
where it is offered (Slack, the console, the CLI) and what runs it.

Pure data. What reads it:
- `bot.text.commands` (the `/scale` grammar: the subcommands, their aliases, options and flags) and
  `bot.text.messages` (`USAGE`, `SUMMARY`: `help`, "did you mean", the usage line of an error);
- `bot.slack.dispatch.Dispatcher` (the handler of a parsed `/scale` command, `slack`) and the
  `/scale` listener (what the ack says, `ack`), so Slack and the console answer alike;
- `bot.cli.console` (its own stand-ins for what Slack provides, `as USER`, `approve`, `wait`, …:
  their words, help lines and functions, `console`);
- `bot.cli.parser` (each `scalebot` command's one-line help, its handler `cli` and the Examples of
  its `--help`) and `bot.cli.completion` (what a command's positionals complete to, `completes`);
- `scripts/command_docs.py`, which writes the Slack app manifest's usage hint and README's `/scale`
  table from it (a unit test keeps both current and compares the CLI's tree with the table).

One module over 600 lines on purpose: it is the one table of every command, and splitting it by
surface would bring back the copies it replaced.

A new `/scale` subcommand is one `CommandSpec` here, its parse in `bot.text.commands` and its handler
method on `Dispatcher`; a new `scalebot` command is one `CommandSpec` and its arguments in
`bot.cli.parser`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass


class Surface(enum.StrEnum):
    SLACK = "slack"
    """`/scale …` in Slack."""
    CONSOLE = "console"
    """`scalebot console`: the same words, parser and dispatcher as Slack, in a terminal."""
    CLI = "cli"
    """`scalebot …`."""


CHAT = frozenset({Surface.SLACK, Surface.CONSOLE})
EVERYWHERE = frozenset({Surface.SLACK, Surface.CONSOLE, Surface.CLI})
CLI_ONLY = frozenset({Surface.CLI})
CONSOLE_ONLY = frozenset({Surface.CONSOLE})


class AckReply(enum.Enum):
    """What the `/scale` listener acks with (within Slack's 3 s, before any work)."""

    EMPTY = "empty"
    """Nothing: the handler answers (ephemeral) once it has run."""
    ANSWER = "answer"
    """The answer itself: it needs nothing but the text (`help`)."""
    PLANNING = "planning"
    """"Planning zero of prod…": a request or a plan takes a cluster snapshot first."""


@dataclass(frozen=True, slots=True)
class CommandSpec:
    name: str
    """The command's path: `scale`, `plan drain`, `operations list`."""
    summary: str
    """One line: Slack's `help`, the CLI's `--help`, README."""
    surfaces: frozenset[Surface]
    usage: str = ""
    """Slack and the console: the words after `/scale` (help, "did you mean", a usage error's hint)."""
    hint: str = ""
    """Its words in the Slack app manifest's one-line usage hint ("": left out of it)."""
    aliases: tuple[str, ...] = ()
    """Other words for it in Slack (`/scale op list`)."""
    options: frozenset[str] = frozenset()
    """Slack: options taking a value (`cluster=NAME`, `--cluster NAME`, `--cluster=NAME`)."""
    flags: frozenset[str] = frozenset()
    """Slack: flags without a value (`--force`)."""
    slack: str = ""
    """The `bot.slack.dispatch.Dispatcher` method that runs it after the ack."""
    ack: AckReply = AckReply.EMPTY
    cli: str = ""
    """The `scalebot` handler, `module:function`, imported only when the command runs."""
    cli_name: str = ""
    """Its name on the command line when it differs (`operations` for Slack's `ops`)."""
    cli_aliases: tuple[str, ...] = ()
    examples: tuple[str, ...] = ()
    """Whole lines as typed: `/scale …` for Slack and the console, `scalebot …` for the CLI."""
    readme: str = ""
    """README's cell for the `/scale` table, when it says more than `summary`."""
    console: str = ""
    """A console-only command's function in `bot.cli.console` (a stand-in for what Slack provides)."""
    completes: str = ""
    """What the shell completes its positionals to (`bot.cli.complete.KINDS`: nodes, pools, ...)."""
    hidden: bool = False
    """Left out of `--help` and of completion (the completion scripts' own `__complete`)."""

    @property
    def command_line(self) -> str:
        """Its path on the command line."""
        return self.cli_name or self.name

    def examples_for(self, prefix: str) -> tuple[str, ...]:
        return tuple(line for line in self.examples if line.startswith(prefix + " "))


_CLUSTER = frozenset({"cluster"})
_REQUEST = "a request: a plan card in the channel with Approve / Reject when the policy wants approval"

COMMANDS: tuple[CommandSpec, ...] = (
    CommandSpec(
        "help",
        "this help",
        CHAT,
        usage="help [SUBCOMMAND]",
        hint="help",
        aliases=("?",),
        slack="answer_help",
        ack=AckReply.ANSWER,
        examples=("/scale help", "/scale help zero"),
        readme="usage, of every subcommand or of one",
    ),
    CommandSpec(
        "status",
        "pools, sizes, running operations and the next scheduled event",
        EVERYWHERE,
        usage="status [CLUSTER]",
        hint="status",
        options=_CLUSTER,
        slack="answer_status",
        cli="bot.cli.records:status",
        examples=(
            "/scale status",
            "/scale status dev-eu",
            "scalebot status",
            "scalebot status dev-eu -o yaml",
        ),
        readme=(
            "pools and sizes, running operations, the next scheduled event (viewer role at least; without a "
            "cluster, the clusters you have a role on)"
        ),
        completes="clusters",
    ),
    CommandSpec(
        "plan",
        "what an operation would do, without doing it",
        EVERYWHERE,
        usage="plan zero|wake|scale|drain|consolidate … (same arguments as the command; changes nothing)",
        hint="plan …",
        slack="take_request",
        ack=AckReply.PLANNING,
        examples=(
            "/scale plan zero dev-eu",
            "/scale plan scale web 2",
            "scalebot plan zero",
            "scalebot plan drain node-1 -o json",
        ),
        readme=(
            "the plan, privately, changing nothing (viewer role; at most 5 per minute per person, since it "
            "lists the whole cluster)"
        ),
    ),
    CommandSpec(
        "plan drain",
        "what a drain would evict, delete, skip or be refused, and why (changes nothing)",
        CLI_ONLY,
        cli="bot.cli.plans:cmd_plan_drain",
        examples=("scalebot plan drain node-1", "scalebot plan drain -l scalebot.io/pool=batch -o json"),
        completes="nodes",
    ),
    CommandSpec(
        "plan consolidate",
        "which nodes could go because their pods fit on the others (changes nothing)",
        CLI_ONLY,
        cli="bot.cli.plans:cmd_plan_consolidate",
        examples=("scalebot plan consolidate", "scalebot plan consolidate --max-nodes 3 -o json"),
    ),
    CommandSpec(
        "plan advise",
        "which pool to grow for the unschedulable pods, by how many nodes (changes nothing)",
        CLI_ONLY,
        cli="bot.cli.plans:cmd_plan_advise",
        examples=("scalebot plan advise", "scalebot plan advise -o json"),
    ),
    CommandSpec(
        "plan zero",
        "pre-flight of `zero`",
        CLI_ONLY,
        cli="bot.cli.plans:cmd_plan_op",
        examples=("scalebot plan zero", "scalebot plan zero web batch --simulated"),
        completes="pools",
    ),
    CommandSpec(
        "plan scale",
        "pre-flight of `scale`",
        CLI_ONLY,
        cli="bot.cli.plans:cmd_plan_op",
        examples=("scalebot plan scale web 2", "scalebot plan scale batch 0 --simulated"),
        completes="pools",
    ),
    CommandSpec(
        "plan wake",
        "pre-flight of `wake`",
        CLI_ONLY,
        cli="bot.cli.plans:cmd_plan_op",
        examples=("scalebot plan wake", "scalebot plan wake web"),
        completes="pools",
    ),
    CommandSpec(
        "drain",
        "cordon and drain nodes (kubectl drain semantics)",
        EVERYWHERE,
        usage="drain NODE… [cluster=NAME] [--force] [--disable-eviction]",
        hint="drain NODE…",
        options=_CLUSTER,
        flags=frozenset({"force", "disable-eviction"}),
        slack="take_request",
        ack=AckReply.PLANNING,
        cli="bot.cli.drain:cmd_drain",
        examples=(
            "/scale drain node-1 node-2",
            "scalebot drain node-1 node-2",
            "scalebot drain -l scalebot.io/pool=batch --timeout 10m",
            "scalebot drain node-1 --dry-run=server",
            "scalebot drain node-1 --force --yes",
            "scalebot drain --simulated -l scalebot.io/pool=batch",
        ),
        readme=f"{_REQUEST}; `--force` and `--disable-eviction` as kubectl's, approved like any request",
        completes="nodes",
    ),
    CommandSpec(
        "cordon",
        "mark nodes unschedulable",
        EVERYWHERE,
        usage="cordon NODE… [cluster=NAME]",
        hint="cordon NODE…",
        options=_CLUSTER,
        slack="set_cordon",
        cli="bot.cli.drain:cmd_cordon",
        examples=(
            "/scale cordon node-1",
            "scalebot cordon node-1",
            "scalebot cordon -l scalebot.io/pool=batch",
            "scalebot cordon --simulated web-0",
        ),
        readme=(
            "immediate, audited; operator role; refused while an operation holds the node or its pool, on a "
            "protected cluster, and where `approval_required_for` lists `cordon` (request a `drain` "
            "instead, which is approved)"
        ),
        completes="nodes",
    ),
    CommandSpec(
        "uncordon",
        "mark nodes schedulable again",
        EVERYWHERE,
        usage="uncordon NODE… [cluster=NAME]",
        hint="uncordon NODE…",
        options=_CLUSTER,
        slack="set_cordon",
        cli="bot.cli.drain:cmd_cordon",
        examples=(
            "/scale uncordon node-1",
            "scalebot uncordon node-1",
            "scalebot uncordon -l scalebot.io/pool=batch",
        ),
        readme="as `cordon`; also removes scalebot's draining taint (`approval_required_for` may list it)",
        completes="nodes",
    ),
    CommandSpec(
        "scale",
        "scale one node pool to N nodes (drains what it removes)",
        EVERYWHERE,
        usage="scale POOL N [cluster=NAME] [--one-at-a-time]",
        hint="scale POOL N",
        options=frozenset({"cluster", "pool"}),
        flags=frozenset({"one-at-a-time"}),
        slack="take_request",
        ack=AckReply.PLANNING,
        cli="bot.cli.pools:cmd_pool_op",
        examples=(
            "/scale scale web 3",
            "/scale scale web 1 --one-at-a-time",
            "scalebot scale web 2",
            "scalebot scale web 1 --one-at-a-time --yes",
        ),
        readme=(
            f"{_REQUEST} (a scale-up past the pool's ceiling, `policy.scale_up_ceiling`, always does, and "
            "the card says why); `N` is 0-10000 in ASCII digits; `--one-at-a-time` drains non-empty "
            "nodes one at a time (default: the cluster's `policy.drain_one_at_a_time`)"
        ),
        completes="pools",
    ),
    CommandSpec(
        "zero",
        "scale pools (default: every pool) to 0; two phases when all go",
        EVERYWHERE,
        usage="zero [CLUSTER | POOL…] [--workloads] [--force] [--one-at-a-time]",
        hint="zero [cluster|pool…]",
        options=_CLUSTER,
        flags=frozenset({"force", "workloads", "one-at-a-time"}),
        slack="take_request",
        ack=AckReply.PLANNING,
        cli="bot.cli.pools:cmd_pool_op",
        examples=(
            "/scale zero dev-eu",
            "/scale zero web batch --workloads",
            "scalebot zero --simulated --yes",
            "scalebot zero web batch",
            "scalebot zero --workloads --yes",
        ),
        readme=f"{_REQUEST}; takes `--one-at-a-time` as `scale` does, and `--workloads` (workloads too)",
        completes="pools",
    ),
    CommandSpec(
        "wake",
        "restore pools to the sizes recorded before they were scaled down",
        EVERYWHERE,
        usage="wake [CLUSTER | POOL…] [for 3h] [--workloads]",
        hint="wake [cluster] [for 3h]",
        options=frozenset({"cluster", "for"}),
        flags=frozenset({"workloads"}),
        slack="take_request",
        ack=AckReply.PLANNING,
        cli="bot.cli.pools:cmd_pool_op",
        examples=(
            "/scale wake dev-eu",
            "/scale wake dev-eu for 3h",
            "scalebot wake --simulated",
            "scalebot wake web",
            "scalebot wake --wave system --wave web,batch",
        ),
        readme=(
            f"{_REQUEST}; `for 3h`: wake now and put the cluster back to sleep after 3 h (announced, "
            "run by the schedules)"
        ),
        completes="pools",
    ),
    CommandSpec(
        "consolidate",
        "remove nodes whose pods fit on the others, one by one (fit re-checked before each)",
        EVERYWHERE,
        usage="consolidate [CLUSTER] [POOL…]",
        hint="consolidate [cluster]",
        options=_CLUSTER,
        slack="take_request",
        ack=AckReply.PLANNING,
        cli="bot.cli.pools:cmd_consolidate",
        examples=(
            "/scale consolidate dev-eu",
            "scalebot consolidate",
            "scalebot consolidate web --max-nodes 2",
        ),
        readme=(
            "a request (a scale-down for the policy: tag `consolidate` and `scale_down`): the card lists the "
            "nodes that go, where each of their pods is expected to land, and every node that stays with "
            "why; approved, it runs node by node with the fit re-checked before each, progress in the "
            "thread. Refused, saying which, while another autoscaler removes nodes on the cluster (see "
            "`consolidation.allow_alongside_autoscaler`)"
        ),
        completes="pools",
    ),
    CommandSpec(
        "advise",
        "which pool to grow for pending pods (least waste), and the underused nodes",
        CHAT,
        usage="advise [CLUSTER]",
        hint="advise [cluster]",
        options=_CLUSTER,
        slack="answer_advice",
        examples=("/scale advise dev-eu",),
        readme=(
            "privately: for the Unschedulable pods, the pool to grow (least waste, cluster-autoscaler's "
            "waste line per candidate pool, within pool maximums) and by how many nodes, with a button that "
            "*requests* that scale-up as an ordinary `scale` request by the clicker (role and approval as "
            "configured; its value is read back through the `scale` command's parser, so a tampered size, "
            "pool or cluster is refused as typed); and the nodes under 50% of allocatable requested, each "
            "with whether its pods could move (viewer role; rate-limited like `plan`). The CLI's is "
            "`scalebot plan advise`"
        ),
    ),
    CommandSpec(
        "ops",
        "recent operations, their history, cancel one",
        EVERYWHERE,
        usage="ops [list [CLUSTER] [--active] | show ID | cancel ID]",
        hint="ops",
        aliases=("operations", "op", "list"),
        options=_CLUSTER,
        flags=frozenset({"active"}),
        slack="handle_ops",
        cli="bot.cli.operations:cmd_operations",
        cli_name="operations",
        cli_aliases=("ops",),
        examples=(
            "/scale ops",
            "/scale ops show op-1a2b3c4d",
            "scalebot ops list",
            "scalebot ops list -o wide",
            "scalebot ops show op-1a2b3c4d -o yaml",
            "scalebot ops cancel op-1a2b3c4d",
            "scalebot ops verify-audit --db scalebot.db",
        ),
        readme=(
            "operations; one with its full audit trail (viewer role on its cluster), people in it by their "
            "Slack name (`users.info`, cached for an hour; their ID when Slack cannot tell)"
        ),
    ),
    CommandSpec(
        "operations list",
        "the recent operations, newest first (read-only)",
        CLI_ONLY,
        examples=(
            "scalebot ops list",
            "scalebot ops list -o wide",
            "scalebot ops list -o name --db /var/lib/scalebot.db",
        ),
    ),
    CommandSpec(
        "operations show",
        "one operation: its plan, journal and audit trail (read-only)",
        CLI_ONLY,
        examples=("scalebot ops show op-1a2b3c4d", "scalebot ops show op-1a2b3c4d -o json"),
        completes="operations",
    ),
    CommandSpec(
        "operations cancel",
        "cancel an operation waiting for approval or running",
        CLI_ONLY,
        examples=("scalebot ops cancel op-1a2b3c4d", "scalebot ops cancel op-1a2b3c4d --simulated"),
        completes="operations",
    ),
    CommandSpec(
        "operations verify-audit",
        "re-compute the audit log's hash chain (read-only)",
        CLI_ONLY,
        examples=(
            "scalebot ops verify-audit --db scalebot.db",
            "scalebot ops verify-audit --db copy.db --expect-head HASH",
        ),
    ),
    CommandSpec(
        "schedule",
        "nightly and weekend shutdowns (the CLI lists them; add and change them in Slack or the console)",
        EVERYWHERE,
        usage="schedule add|list|show|pause|resume|delete|approve|unapprove|next|skip …",
        hint="schedule …",
        slack="hand_to_owner",
        cli="bot.cli.records:cmd_schedule",
        examples=(
            "/scale schedule list",
            "/scale schedule next",
            "scalebot schedule list",
            "scalebot schedule next dev-eu -o json",
        ),
        readme="the schedules: see the table below",
        completes="clusters",
    ),
    CommandSpec(
        "whoami",
        "your roles per cluster",
        CHAT,
        usage="whoami [CLUSTER] [@user]",
        hint="whoami",
        options=_CLUSTER,
        slack="answer_whoami",
        examples=("/scale whoami", "/scale whoami dev-eu @alice"),
        readme=(
            "your role on each cluster; someone else's (`@user`) only on the clusters you have a role on "
            "(with no role anywhere, refused)"
        ),
    ),
    # The console's stand-ins for what Slack itself provides (who you are, the buttons, time).
    CommandSpec("as", "switch user ({users})", CONSOLE_ONLY, usage="as USER", console="as_user"),
    CommandSpec(
        "approve",
        "click Approve on a card (default: the latest waiting for approval)",
        CONSOLE_ONLY,
        usage="approve [OP]",
        console="click_approve",
    ),
    CommandSpec(
        "reject", "click Reject on a card", CONSOLE_ONLY, usage="reject [OP]", console="click_reject"
    ),
    CommandSpec(
        "cancel",
        "click Cancel on a running operation (default: the latest running)",
        CONSOLE_ONLY,
        usage="cancel [OP]",
        console="click_cancel",
    ),
    CommandSpec(
        "wait",
        "wait until running operations finish, showing their progress",
        CONSOLE_ONLY,
        usage="wait",
        console="wait_for_operations",
    ),
    CommandSpec(
        "postpone",
        "click a schedule announcement's Postpone 1h (default: the latest announcement)",
        CONSOLE_ONLY,
        usage="postpone [SCHEDULE]",
        console="click_postpone",
    ),
    CommandSpec(
        "skip",
        "click a schedule announcement's Skip this time",
        CONSOLE_ONLY,
        usage="skip [SCHEDULE]",
        console="click_skip",
    ),
    CommandSpec(
        "run-now",
        "click a schedule announcement's Run now",
        CONSOLE_ONLY,
        usage="run-now [SCHEDULE]",
        console="click_run_now",
    ),
    CommandSpec(
        "schedule add",
        "alone: the schedule form, one field at a time",
        CONSOLE_ONLY,
        usage="schedule add",
        console="schedule_form",
    ),
    CommandSpec(
        "fast-forward",
        "move the simulated clock on (`2d`), running each schedule event on the way, or to the next "
        "schedule event (`next`: announcement, sleep or wake) and run it",
        CONSOLE_ONLY,
        usage="fast-forward 2d|next",
        aliases=("ff",),
        console="fast_forward",
    ),
    CommandSpec("clock", "the console's time", CONSOLE_ONLY, usage="clock", console="show_clock"),
    CommandSpec(
        "quit",
        "leave the console (end of input does the same)",
        CONSOLE_ONLY,
        usage="quit",
        aliases=("exit",),
    ),
    CommandSpec(
        "resume",
        "continue operations interrupted by a stop or a crash",
        CLI_ONLY,
        cli="bot.cli.operations:cmd_resume",
        examples=("scalebot resume", "scalebot resume --simulated"),
    ),
    CommandSpec(
        "report",
        "reports from the operation history (no kubeconfig)",
        CLI_ONLY,
        examples=("scalebot report savings", "scalebot report savings --since 28d --tz Europe/Berlin"),
    ),
    CommandSpec(
        "report savings",
        "node-hours (and money, given prices) saved by sleeps, per cluster, pool and week",
        CLI_ONLY,
        cli="bot.cli.report:cmd_savings",
        examples=(
            "scalebot report savings",
            "scalebot report savings --since 2026-03-01 --png savings.png",
            "scalebot report savings -o json --config scalebot.yaml",
        ),
    ),
    CommandSpec(
        "demo",
        "zero-scale and wake the built-in SIMULATED cluster, for a first look",
        CLI_ONLY,
        cli="bot.cli.serve:cmd_demo",
        examples=("scalebot demo", "scalebot demo --reset", "scalebot demo --reset --db rehearsal.db"),
    ),
    CommandSpec(
        "console",
        "the /scale commands, approvals and live progress in a terminal",
        CLI_ONLY,
        cli="bot.cli.serve:cmd_console",
        examples=("scalebot console --simulated", "scalebot console --simulated --clock-speed 600"),
    ),
    CommandSpec(
        "run",
        "serve Slack (Socket Mode or HTTP), run operations and schedules",
        CLI_ONLY,
        cli="bot.cli.serve:cmd_run",
        examples=(
            "scalebot run --config scalebot.yaml",
            "scalebot run --config scalebot.yaml --no-leader-election",
        ),
    ),
    CommandSpec(
        "sandbox",
        "a local control plane with kwok nodes to play with",
        CLI_ONLY,
        cli="bot.cli.serve:cmd_sandbox",
        examples=("scalebot sandbox up", "scalebot sandbox down"),
    ),
    CommandSpec(
        "__complete",
        "the names a completion script offers (nodes, pools, operations, schedules, clusters)",
        CLI_ONLY,
        cli="bot.cli.complete:cmd_complete",
        examples=(
            "scalebot __complete nodes --prefix web",
            "scalebot __complete operations --db scalebot.db",
        ),
        hidden=True,
    ),
    CommandSpec(
        "completion",
        "print a shell completion script (bash, zsh or fish)",
        CLI_ONLY,
        cli="bot.cli.parser:cmd_completion",
        examples=("scalebot completion bash", "scalebot completion zsh", "scalebot completion fish"),
    ),
)

BY_NAME: Mapping[str, CommandSpec] = {spec.name: spec for spec in COMMANDS}
SLACK: Mapping[str, CommandSpec] = {spec.name: spec for spec in COMMANDS if Surface.SLACK in spec.surfaces}
"""The `/scale` subcommands, in the order `help` lists them."""
CLI: Mapping[str, CommandSpec] = {
    spec.command_line: spec for spec in COMMANDS if Surface.CLI in spec.surfaces
}
"""The `scalebot` commands by their path on the command line (`operations list`)."""
ALIASES: Mapping[str, str] = {alias: spec.name for spec in SLACK.values() for alias in spec.aliases}
"""`/scale` words that stand for a subcommand."""


def manifest_hint() -> str:
    """The Slack app manifest's usage hint of `/scale`: every subcommand that has words in it."""
    return " | ".join(spec.hint for spec in SLACK.values() if spec.hint)
