"""The engine: the job handlers that read, decide and record.

In: a job (a PR's sync step, a progress check, a fix, the merge stage, a command, the poller's
and the watchdog's ticks). Each reads GitHub and the database, asks the rules (bot/rules/) what
to do, and records the decision with its effects (bot/effects/outbox.py) in one fenced
transaction. Out: rows, queued jobs and effects; it writes nothing to GitHub itself.
"""
