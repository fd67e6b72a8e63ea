"""The rules: pure decisions and their vocabulary.

In: plain snapshots (a PR's row and round as dataclasses, review threads, check states, a
comment's text). Out: decisions (a list of actions, a progress outcome, a severity, a parsed
command). Nothing here reads GitHub, the database or the clock; the engine reads, asks these
functions and records what they decide.
"""
