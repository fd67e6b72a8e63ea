"""Events a transaction notes, handed to listeners only once it commits.

The process's metrics count them (`bot/metrics.py`): a round whose transaction rolled back was
never started, so it must not be counted, and the storage module that writes the row is the one
place every caller passes through. Storage knows nothing of the listeners.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import event
from sqlalchemy.orm import Session
from sqlmodel.ext.asyncio.session import AsyncSession

_KEY = "convergebot_events"
_listeners: list[Callable[[str, str], None]] = []


def note(session: AsyncSession | Session, name: str, label: str) -> None:
    """`name` happened (with `label`, e.g. a round's kind) if this transaction commits."""
    session.info.setdefault(_KEY, []).append((name, label))


def listen(fn: Callable[[str, str], None]) -> None:
    if fn not in _listeners:
        _listeners.append(fn)


def unlisten(fn: Callable[[str, str], None]) -> None:
    if fn in _listeners:
        _listeners.remove(fn)


@event.listens_for(Session, "after_commit")
def _deliver(session: Session) -> None:
    for name, label in session.info.pop(_KEY, ()):
        for fn in _listeners:
            fn(name, label)


@event.listens_for(Session, "after_rollback")
def _drop(session: Session) -> None:
    session.info.pop(_KEY, None)
