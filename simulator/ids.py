"""Identifiers and timestamps shaped like GitHub's."""

from __future__ import annotations

import base64
import itertools
from datetime import UTC, datetime
from typing import overload

# GitHub ids are large integers that only grow; tests that compare "newer review" by id rely on it.
FIRST_ID = 1_000_000


class IdAllocator:
    """One increasing sequence shared by every object kind, so an id is unique across kinds."""

    def __init__(self, start: int = FIRST_ID) -> None:
        self._next = itertools.count(start)

    def __call__(self) -> int:
        return next(self._next)


def node_id(prefix: str, number: int) -> str:
    """An opaque global node id in GitHub's newer `PREFIX_base64` style (e.g. `PRRT_...`)."""
    raw = f"sim:{number}".encode()
    return f"{prefix}_{base64.urlsafe_b64encode(raw).decode().rstrip('=')}"


def parse_node_id(node: str, prefix: str) -> int | None:
    """The number inside a node id made by `node_id`, or None if it is not one of `prefix`."""
    head, _, tail = node.partition("_")
    if head != prefix or not tail:
        return None
    try:
        raw = base64.urlsafe_b64decode(tail + "=" * (-len(tail) % 4)).decode()
    except ValueError:
        return None
    kind, _, number = raw.partition(":")
    return int(number) if kind == "sim" and number.isdigit() else None


def now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


@overload
def iso(moment: datetime) -> str: ...


@overload
def iso(moment: None) -> None: ...


@overload
def iso(moment: datetime | None) -> str | None: ...


def iso(moment: datetime | None) -> str | None:
    """ISO-8601 with a `Z` suffix, as every GitHub timestamp is written."""
    if moment is None:
        return None
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
