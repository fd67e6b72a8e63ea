"""How a PR is shown to people and programs: one JSON shape for the CLI and the API."""

from __future__ import annotations

from storage.prs import PrView


def pr_json(view: PrView) -> dict:
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
        "synced_at": iso(pr.synced_at),
        "updated_at": iso(pr.updated_at),
        "converged_at": iso(pr.converged_at),
        "merged_at": iso(pr.merged_at),
    }
