"""A PR object whose `head.sha` lags its branch ref, as GitHub's does for a while after a push.

GitHub updates the branch ref at once, but the PR object (`GET /pulls/{n}`, the PR list) keeps
showing the previous head for a while. A lag freezes the PR object's head at the sha the branch
had when the lag began, until it is released or has served its number of reads. Only the PR
object lags: the branch ref, webhooks, GraphQL and every write's answer read git as always.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import Unprocessable


@dataclass
class HeadLag:
    sha: str  # what the PR object says its head is while the lag lasts
    reads_left: int | None = None  # None: until released; else this many more lagging reads

    def __post_init__(self) -> None:
        n = self.reads_left
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise Unprocessable(f"reads must be a positive integer or null, got {n!r}", "reads")

    def read(self) -> bool:
        """Spend one lagging read; True when this was the last (the lag is over after it)."""
        if self.reads_left is None:
            return False
        self.reads_left -= 1
        return self.reads_left <= 0

    def to_dict(self) -> dict:
        return {"sha": self.sha, "reads_left": self.reads_left}
