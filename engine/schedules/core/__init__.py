"""The schedules' pure core: the schedule language (spec), its instants (recurrence), what changes one
occurrence (one_off), days off as values (days_off), schedules as values (model), what is due when
(due), force on a scheduled sleep (force), the requests a run makes (requests) and the text schedules
produce (text).

Pure: no clock, no store, no calendar library, no cluster; the import contract "pure modules do no
I/O" names this package, so a module added here is held to it.
"""
