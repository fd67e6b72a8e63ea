"""What can go wrong crossing GitHub, in the terms the job layer acts on."""

from __future__ import annotations

from datetime import datetime


class GitHubError(Exception):
    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class NotFound(GitHubError):
    """404 (or 410): the thing is gone or the credentials cannot see it."""


class Conflict(GitHubError):
    """409/405/422: GitHub refused the change as things stand (stale sha, not mergeable...)."""


class Unavailable(GitHubError):
    """5xx, timeouts, connection errors: retry with backoff, never assume the write happened."""


class Malformed(Unavailable):
    """An answer that is not what GitHub's API documents: not JSON (an HTML page, a body cut
    short), a field missing or of another type, a file's content not base64. GitHub answered,
    but nothing can be read from it: retried with backoff like an outage."""


class RateLimited(GitHubError):
    """403/429 with a limit: the job is re-scheduled for `retry_at`, no worker sleeps on it."""

    def __init__(
        self, message: str, retry_at: datetime | None, secondary: bool, status: int | None = None
    ):
        super().__init__(message, status)
        self.retry_at = retry_at
        self.secondary = secondary
