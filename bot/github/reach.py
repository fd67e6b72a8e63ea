"""What the process knows of its way to GitHub, for /readyz: whether GitHub rejected the
credentials, and since when no request has been answered at all.

Told by the client after every call (`Transport._call`). Any answer GitHub gives, even a 404
or a 409, shows it is reachable and takes the credentials; a 401 says it rejects them; a 5xx, a
timeout or a connection that fails says nothing answered. A rate limit is an answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta


@dataclass
class GitHubReach:
    # When GitHub last answered a request (any status but 5xx); None: not yet.
    answered_at: datetime | None = None
    # Since when every request failed unanswered (5xx, timeout, connection); None: the last answered.
    unanswered_since: datetime | None = None
    # The last answer was a 401: the token (or the App's key) is not accepted.
    credentials_rejected: bool = False

    def answered(self, status: int) -> None:
        now = datetime.now(UTC)
        self.answered_at, self.unanswered_since = now, None
        self.credentials_rejected = status == 401

    def unanswered(self) -> None:
        if self.unanswered_since is None:
            self.unanswered_since = datetime.now(UTC)

    def problems(self, unreachable_after: timedelta, now: datetime | None = None) -> list[str]:
        """What /readyz reports: public, so no error text, only the part and how long."""
        now = now or datetime.now(UTC)
        out = []
        if self.credentials_rejected:
            out.append("GitHub rejected the credentials (401)")
        if self.unanswered_since is not None and now - self.unanswered_since >= unreachable_after:
            out.append(f"GitHub unreachable for {int((now - self.unanswered_since).total_seconds())}s")
        return out
