"""GitHub's values read from what it sends: timestamps ("2026-11-30T05:21:03Z") as aware datetimes,
ids as positive 64-bit ints. A payload is not trusted to be well formed."""

from __future__ import annotations

from datetime import datetime


def parse_time(text: object) -> datetime | None:
    """The stamp as an aware datetime; None when it is missing or malformed (a payload is not
    trusted to be well formed)."""
    if not isinstance(text, str) or not text:
        return None
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def github_id(value: object) -> int | None:
    """An id or number: a positive int that fits a BIGINT (JSON's `true` is no id)."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**63:
        return value
    return None
