"""The commands that start something bigger than one operation: `run` (the Slack service),
`console` (the Slack experience in a terminal), `demo` (the simulated cluster) and `sandbox` (a
local control plane)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from datetime import timedelta

from bot.cli.common import EXIT_OK, CliError, cli_user, live_display
from bot.cli.operations_from_flags import build_operations, follow
from bot.config import logs
from bot.runtime import wiring
from engine.domain.clock import ScaledClock, SystemClock
from engine.domain.operation import OperationRequest, OpKind, Target
from engine.domain.settings import RunnerSettings
from engine.operations.service import new_operations
from engine.store.database import Store


def cmd_demo(args: argparse.Namespace) -> int:
    if args.reset:
        from bot.cli.rehearsal import reset

        return reset(args.db)
    print("SIMULATED cluster (in memory, nothing real is changed): pools system, web, batch\n")
    handle, _ = wiring.simulated_cluster()
    settings = RunnerSettings(
        graceful_window=timedelta(seconds=12), pass_interval=timedelta(seconds=2), settle=timedelta(seconds=1)
    )
    ops = new_operations(Store(":memory:"), {handle.name: handle}, {}, SystemClock(), settings=settings)
    print("The demo shortens phase 1 from 5 minutes to 12 seconds.\n", flush=True)
    zero = OperationRequest(kind=OpKind.ZERO, target=Target(cluster=handle.name), requested_by=cli_user())
    code = follow(ops, lambda: ops.request(zero), live=live_display(args))
    if code != EXIT_OK:
        return code
    print("\nNow waking the cluster back to the recorded sizes:\n", flush=True)
    wake = OperationRequest(kind=OpKind.WAKE, target=Target(cluster=handle.name), requested_by=cli_user())
    return follow(ops, lambda: ops.request(wake), live=live_display(args))


def cmd_console(args: argparse.Namespace) -> int:
    from bot.cli import console

    if args.clock_speed <= 0 or (args.clock_speed != 1 and not args.simulated):
        raise CliError("--clock-speed needs --simulated and a positive factor, e.g. --clock-speed 600")
    if args.simulated:
        # A --db given keeps the simulated cluster, its operations and its schedules in that file,
        # as the other --simulated commands do; without one the rehearsal leaves nothing behind.
        ops = console.simulated_operations(clock=ScaledClock(args.clock_speed), db=args.db)
    else:
        args.db = args.db or os.environ.get("SCALEBOT_DB", "scalebot.db")
        # The console's users (alice operator, bob approver, carol viewer) act on this cluster.
        ops = build_operations(args, policies=lambda name: {name: console.console_policy(name)})
    return console.run_console(
        ops=ops,
        default_cluster=ops.clusters()[0],
        users=None,
        stdin=sys.stdin,
        stdout=sys.stdout,
        simulated=args.simulated,
    )


def cmd_run(args: argparse.Namespace) -> int:
    from bot.config import settings
    from bot.runtime import run

    # A SettingsError or RunError is configuration (exit 2): one line naming the key and the fix.
    loaded = settings.load(args.config, os.environ)
    settings.forget_secret_env(os.environ)  # why: settings.forget_secret_env
    named = settings.channel_names(loaded)
    if named:  # `#name` channels need Slack's channel list before any rule may use them
        run.check_slack(loaded)
        loaded = run.resolve_channel_names(loaded)
    # Local checks (config, clusters' kubeconfigs, the database) first, then Slack's answer.
    service = run.build_service(loaded, leader_election=args.leader_election)
    if not named:
        run.check_slack(loaded)
    run.install_signal_handlers(service)
    json_format = args.log_format == "json"

    def started() -> None:
        for warning in service.warnings:
            logs.announce(warning, json_format=json_format, stream=sys.stderr, level=logging.WARNING)
        # Whether the audit chain is keyed: unkeyed, anyone who can write the file can rewrite it
        # consistently, and only the `audit head` lines this process logs reveal that.
        audit = (
            "audit chain keyed"
            if service.ops.store.audit_keyed
            else "audit chain UNKEYED (set SCALEBOT_AUDIT_KEY_FILE or SCALEBOT_AUDIT_KEY)"
        )
        logs.announce(
            f"scalebot running: {', '.join(service.ops.clusters())}; database {loaded.db_path}; {audit}",
            json_format=json_format,
            stream=sys.stdout,
        )

    return service.serve(on_started=started)  # a RunError is configuration: exit 2


def cmd_sandbox(args: argparse.Namespace) -> int:
    try:
        from localcluster import sandbox
    except ModuleNotFoundError as exc:  # cryptography is an extra: only the test control plane signs
        if (exc.name or "").split(".")[0] != "cryptography":
            raise
        raise CliError(
            "scalebot sandbox needs the test control plane's packages: run it from scripts/test's "
            ".venv, or pip install 'scalebot[sandbox]'"
        ) from exc

    if args.action == "down":
        sandbox.down(args.state_dir)
        print("sandbox stopped")
        return EXIT_OK
    info = sandbox.up(args.state_dir)
    print(json.dumps(info, indent=2, default=str))
    return EXIT_OK
