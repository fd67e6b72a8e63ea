"""Which PRs of a repository changed since the poller last looked: one conditional list read.

GitHub lists a repository's PRs most recently updated first, and a push, a review, a comment or
a state change all move a PR to the top. So the first page of that list, re-read with
If-None-Match, answers 304 (free of rate limit) exactly when no PR of the repository changed,
and when it did change, the PRs updated since the newest one seen last time are the ones to
re-read. This lets the poller leave PRs that are only waiting for a review alone instead of
re-reading each of them (see docs/architecture.md, "Polling").
"""

from __future__ import annotations

from datetime import datetime

import structlog

from bot.github.errors import GitHubError
from bot.github.stamps import parse_time

log = structlog.get_logger(__name__)


class RepoWatch:
    """The marks are what the poller acted on: a look's new marks wait in `looked` until the
    syncs it asked for are queued, and the poller saves both in one transaction (`accept`). A
    tick that fails after looking leaves the marks as they were, so its changes are found again.
    They are kept in the database, so the first tick after a restart needs no full re-read."""

    def __init__(self, github) -> None:
        self.github = github
        self._marks: dict[str, datetime] = {}  # repository → the newest `updated_at` acted on
        # The PRs stamped in the mark's very second: one may change again in that second after
        # the look, unseen by a 304 (same stamp, maybe the same list); the next look re-reads them.
        self._at_mark: dict[str, set[int]] = {}
        self.looked: dict[str, tuple[datetime, set[int]]] = {}  # this tick's, not yet accepted
        self.loaded = False

    def load(self, marks: dict[str, datetime]) -> None:
        self._marks = {repo.lower(): at for repo, at in marks.items()}
        self.loaded = True

    def begin(self) -> None:
        """A tick starts: what a failed tick looked at is looked at again."""
        self.looked = {}

    def accept(self) -> None:
        """The syncs this tick's looks asked for are queued (and the marks saved with them)."""
        for repo, (mark, at_mark) in self.looked.items():
            self._marks[repo], self._at_mark[repo] = mark, at_mark
        self.looked = {}

    def marks_looked(self) -> dict[str, datetime]:
        """The marks this tick's looks would move to (saved with the tick's syncs)."""
        return {repo: mark for repo, (mark, _) in self.looked.items()}

    def mark(self, full_repo: str) -> datetime | None:
        """The newest `updated_at` acted on in the repository."""
        return self._marks.get(full_repo.lower())

    async def changed(self, full_repo: str) -> set[int] | None:
        """Numbers of the repository's PRs updated since the last look, or None when that cannot
        be told: the first look at a repository (no mark, in memory or stored), a failed read, or
        more changes than the pages read reach back to."""
        owner, _, name = full_repo.partition("/")
        mark = self._marks.get(full_repo.lower())
        try:
            pulls, unchanged, complete = await self.github.repository(owner, name).pulls_by_update(mark)
        except GitHubError as e:
            log.warning("repowatch.unreadable", repo=full_repo, error=str(e))
            return None
        repo = full_repo.lower()
        stamps = [(p["number"], at) for p in pulls if (at := parse_time(p.get("updated_at"))) is not None]
        if unchanged and mark is not None:
            # Nothing moved since the last look but the PRs of the mark's second, maybe.
            at_mark = self._at_mark.get(repo, set())
            self.looked[repo] = (mark, set())
            return set(at_mark)
        if stamps:
            newest = max(max(at for _, at in stamps), mark) if mark else max(at for _, at in stamps)
            self.looked[repo] = (newest, {number for number, at in stamps if at == newest})
        if mark is None or not complete:
            return None
        # `>=`: GitHub stamps to the second, and a PR updated in the second of the mark but
        # after that look must not be missed (re-reading one PR too many costs a 304).
        return {number for number, at in stamps if at >= mark}
