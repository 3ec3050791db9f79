"""The command line: `scalebot` and its command groups, the read-only record commands, the savings
report, shell completion, the live terminal panel, and `scalebot console` (the Slack experience in a
terminal).

Owns: arguments, exit codes and terminal output. Must not: hold rules that Slack would not also
apply; the operations service is the shared front door.
"""
