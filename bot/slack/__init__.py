"""The Slack adapter: the Bolt app, its listeners, what a command or a click does (dispatch), the App
Home, origin and channel checks, the directory of people and channels, the schedule UI and the
weekly savings post. `blocks/` holds the pure Block Kit renderers; `delivery/` the one writer
(sender, outbox, live progress).

Owns: everything Slack-shaped. Must not: decide what an operation may do; that is
`engine.operations`, reached through `bot.ports.OperationsPort`.
"""
