"""Effects: the GitHub writes decided by the engine, each safe to repeat and to lose the answer of.

In: outbox rows (bot/engine/outbox.py: the vocabulary, written in the deciding transaction).
Out: the writes on GitHub (`runner`: one handler per effect kind; `replies`: a round's thread
replies and resolves), each looking before it writes so that a retry never writes twice.
"""
