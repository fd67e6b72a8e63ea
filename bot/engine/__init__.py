"""The engine: the job handlers that read, decide and record.

In: a job (a PR's sync step, a progress check, a fix, the merge stage, a command, the watchdog's
tick) or a submission (`submit.py`, the one door every enrollment goes through). Each reads
GitHub and the database, asks the rules (bot/rules/) what to do, and records the decision with
its effects (`outbox.py`, the effects' vocabulary) in one fenced transaction. Out: rows, queued
jobs and effects; it writes nothing to GitHub itself.
"""
