"""What a failed GitHub request becomes: githubkit's exceptions read into the errors of
`errors.py` the job layer acts on (a rate limit with when to come back, a 404, a conflict, an
outage), and the refusal of an installation token told apart from the request's own."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from githubkit.exception import (
    GitHubException,
    GraphQLFailed,
    PrimaryRateLimitExceeded,
    RequestError,
    RequestFailed,
    SecondaryRateLimitExceeded,
)

from bot.github.errors import Conflict, GitHubError, NotFound, RateLimited, Unavailable


def _told_retry_at(exc: RequestFailed) -> datetime | None:
    """When GitHub said to come back (Retry-After, else x-ratelimit-reset), if it said."""
    headers = exc.response.headers
    now = datetime.now(UTC)
    after = headers.get("retry-after", "")
    if after.isdigit():
        return now + timedelta(seconds=max(1, int(after)))
    reset = headers.get("x-ratelimit-reset", "")
    if reset.isdigit():
        return max(now + timedelta(seconds=1), datetime.fromtimestamp(int(reset), UTC))
    return None


def translate(exc: GitHubException, what: str) -> GitHubError:
    if isinstance(exc, (PrimaryRateLimitExceeded, SecondaryRateLimitExceeded)) or (
        isinstance(exc, RequestFailed) and exc.response.status_code == 429
    ):
        primary = isinstance(exc, PrimaryRateLimitExceeded)
        return RateLimited(f"{what}: rate limited ({exc.response.status_code})", _told_retry_at(exc),
                           not primary, exc.response.status_code)
    if isinstance(exc, RequestFailed):
        status = exc.response.status_code
        if status in (404, 410):
            return NotFound(f"{what}: {status}", status)
        if status in (405, 409, 422):
            return Conflict(f"{what}: {status} {_message(exc)}", status)
        if status >= 500:
            return Unavailable(f"{what}: {status}", status)
        return GitHubError(f"{what}: {status} {_message(exc)}", status)
    if isinstance(exc, RequestError):
        return Unavailable(f"{what}: {type(exc.exc).__name__}")
    if isinstance(exc, GraphQLFailed):
        return GitHubError(f"{what}: GraphQL errors {exc.response.errors}")
    return GitHubError(f"{what}: {exc}")


def _message(exc: RequestFailed) -> str:
    try:
        return str(exc.response.json().get("message", ""))
    except Exception:
        return ""


def minting_refused(err: GitHubError) -> int | None:
    """The status GitHub refused an installation token with, when minting it (inside githubkit's
    auth flow, so it comes wrapped as a RequestError) is what failed: 404 for an installation
    that is gone."""
    cause = err.__cause__
    inner = getattr(cause, "exc", None) if isinstance(cause, RequestError) else None
    return inner.response.status_code if isinstance(inner, RequestFailed) else None
