"""How a question to a maintainer names things: text chosen by others, and lengths of time."""

from __future__ import annotations

from datetime import timedelta


def code(text: str) -> str:
    """`text` as a Markdown code span that cannot be broken out of: a file path or a check name
    is chosen by whoever pushed or posted it, and in a code span an @-mention mentions nobody."""
    return "`" + " ".join(text.replace("`", "'").split())[:200] + "`"


def took(td: timedelta) -> str:
    """A timeout as a question says it."""
    seconds = int(td.total_seconds())
    return f"{seconds // 60} minutes" if seconds >= 60 else f"{seconds} seconds"
