"""GitHub's timestamps ("2026-11-30T05:21:03Z") as timezone-aware datetimes."""

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
