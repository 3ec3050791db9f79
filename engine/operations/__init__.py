"""The application service and the machinery that carries operations out: `Operations` (the one
service the Slack bot, the CLI and the schedules call), the policy (who may request and approve what),
the flows (which steps an operation goes through), the runner and its fenced writes, the observers
of progress and the unattended policies.

Owns: the rules every front door shares. Must not: know Slack, APScheduler or the bot.
"""
