"""How a PR is shown to people and programs: one JSON shape for the CLI, the API, the dashboard
and the demo."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from bot.prkey import try_parse_pr_key
from storage import dependencies
from storage.database import Database
from storage.prs import PrView
from storage.statuses import Status


@dataclass(frozen=True)
class Dependencies:
    """A PR's `Depends-on:` PRs as the merge stage last read them from its body, and those of
    them the bot has not seen merged (a dependency it has no row for counts as not merged
    here; the merge stage itself asks GitHub about it)."""

    depends_on: tuple[str, ...] = ()
    unmerged: tuple[str, ...] = ()


NONE = Dependencies()


def _order(key: str):
    parsed = try_parse_pr_key(key)
    return (parsed.full_repo, parsed.number) if parsed else (key, 0)


async def dependencies_of(db: Database, pr_keys: Collection[str] | None = None) -> dict[str, Dependencies]:
    """The dependency view of every PR (or of those in `pr_keys`) that has dependencies."""
    out = {}
    for pr_key, deps in (await dependencies.with_status(db, pr_keys)).items():
        deps = sorted(deps, key=lambda d: _order(d[0]))
        out[pr_key] = Dependencies(tuple(k for k, _ in deps),
                                   tuple(k for k, status in deps if status != Status.MERGED))
    return out


async def prs_json(db: Database, views: Sequence[PrView]) -> list[dict]:
    """`pr_json` of each view, with its dependencies."""
    # One PR reads its own edges; a list (every PR, from `list_all`) reads them all at once.
    deps = await dependencies_of(db, [views[0].pr.pr_key] if len(views) == 1 else None)
    return [pr_json(v, deps.get(v.pr.pr_key, NONE)) for v in views]


def pr_json(view: PrView, deps: Dependencies) -> dict:
    pr = view.pr
    iso = lambda t: t.isoformat() if t else None  # noqa: E731
    return {
        "pr_key": pr.pr_key,
        "title": pr.title,
        "url": pr.url,
        "status": view.derived_status,
        "stored_status": pr.status,
        "round": pr.current_round,
        "max_rounds": pr.max_rounds,
        "process_key": pr.process_key,
        "run_state": view.run_state,
        "converge_only": pr.converge_only,
        "head_sha": pr.head_sha,
        "latest_review_id": pr.latest_review_id,
        "gh_state": pr.gh_state,
        "outcome": pr.outcome,
        "depends_on": list(deps.depends_on),
        "unmerged_deps": list(deps.unmerged),
        "synced_at": iso(pr.synced_at),
        "updated_at": iso(pr.updated_at),
        "converged_at": iso(pr.converged_at),
        "merged_at": iso(pr.merged_at),
    }


def dependencies_text(row: dict) -> str:
    """A `pr_json` row's dependencies in one line for people, those not merged yet marked."""
    if not row["depends_on"]:
        return "-"
    return ", ".join(k + (" (not merged)" if k in row["unmerged_deps"] else "") for k in row["depends_on"])
