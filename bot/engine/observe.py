"""What a fresh read of a PR from GitHub means for its row (pure)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from bot.github.stamps import parse_time
from bot.rules.forks import head_repo
from bot.rules.model import title_of
from storage.statuses import RunState, Status


@dataclass(frozen=True)
class Observation:
    """The truth read from GitHub for one PR, at one moment."""

    pr: dict[str, Any]
    head_sha: str | None  # from the branch ref; None if unreadable
    latest_review_id: int | None
    read_at: datetime
    reviews: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class Observed:
    values: dict[str, Any] = field(default_factory=dict)
    end_run: RunState | None = None  # a merge or close seen from outside ends the run
    changes: tuple[str, ...] = ()


def observe(row: Any, seen: Observation) -> Observed:
    """Row fields to write after a read; `end_run` when the PR was merged or closed out of band."""
    pr = seen.pr
    head = seen.head_sha or (pr.get("head") or {}).get("sha")
    values: dict[str, Any] = {
        "title": (title_of(pr.get("title")) or row.title)[:500],
        "url": pr.get("html_url") or row.url,
        "head_branch": (pr.get("head") or {}).get("ref") or row.head_branch,
        "head_repo": head_repo(pr) or row.head_repo,
        "author": ((pr.get("user") or {}).get("login")) or row.author,
        "head_sha": head,
        "latest_review_id": seen.latest_review_id,
        "gh_state": "merged" if pr.get("merged") else pr.get("state"),
        "synced_at": seen.read_at,
    }
    changes = []
    if head and head != row.head_sha:
        changes.append("head_moved")
    if seen.latest_review_id is not None and seen.latest_review_id != row.latest_review_id:
        changes.append("new_review")
    if pr.get("merged"):
        values |= {"status": Status.MERGED, "merged_at": parse_time(pr.get("merged_at")) or seen.read_at,
                   "outcome": "merged" if row.status == Status.MERGING else "merged outside convergebot"}
        return Observed(values, RunState.COMPLETED, (*changes, "merged"))
    if pr.get("state") == "closed":
        values |= {"status": Status.ABANDONED, "outcome": "closed without merging"}
        return Observed(values, RunState.TERMINATED, (*changes, "closed"))
    return Observed(values, None, tuple(changes))

