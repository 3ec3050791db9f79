"""Scheduled shutdowns and wake-ups: the pure core (`core/`: the schedule language, its instants,
what changes one occurrence, schedules as values, what is due when, force on a sleep, the requests a
run makes, the text schedules produce), and `service.Schedules`, the facade over the parts behind
`/scale schedule …`, the announcement buttons and the bot's timer (book, access, force_records,
announcing, firing, editing, occurrence_decisions, force_decisions; layered by the import contract
"schedules in layers").

Owns: when sleeps and wakes happen and what is announced. Must not: run operations itself other
than through `engine.operations`, or know Slack or APScheduler.
"""
