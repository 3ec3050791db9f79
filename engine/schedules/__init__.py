"""Scheduled shutdowns and wake-ups: the schedule language (spec), its instants (recurrence),
what changes one occurrence (one_off: overrides, missed runs, manual wakes), schedules as values
(model), the timer's decisions, the text schedules produce, and the service behind
`/scale schedule …` and the bot's timer.

Owns: when sleeps and wakes happen and what is announced. Must not: run operations itself other
than through `engine.operations`, or know Slack or APScheduler.
"""
