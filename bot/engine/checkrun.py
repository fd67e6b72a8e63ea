"""The `convergebot` check run on the PR head: round, findings left, last action."""

from __future__ import annotations

import json

import structlog

from bot.github.errors import GitHubError
from bot.prkey import parse_pr_key
from bot.runtime import Runtime
from storage import prs, rounds

from .read import CHECK_RUN_NAME

log = structlog.get_logger(__name__)

_CONCLUSION = {"converged": "success", "merged": "success", "abandoned": "cancelled", "escalated": "neutral"}


def render(status: str, round_no: int, max_rounds: int, findings_left: int | None, last_action: str | None) -> dict:
    title = f"{status.replace('_', ' ')} · round {round_no}/{max_rounds}"
    if findings_left is not None:
        title += f" · {findings_left} finding(s) left"
    summary = (
        f"**Status:** {status}\n\n**Round:** {round_no} of {max_rounds}\n\n"
        f"**Findings left:** {'unknown' if findings_left is None else findings_left}\n\n"
        f"**Last action:** {last_action or '-'}"
    )
    fields: dict = {"status": "in_progress", "output": {"title": title, "summary": summary}}
    if status in _CONCLUSION:
        fields = {"status": "completed", "conclusion": _CONCLUSION[status], "output": fields["output"]}
    return fields


async def publish(rt: Runtime, pr_key: str) -> None:
    """Create the check run for a new head, update it otherwise. Never fails the step."""
    view = await prs.get(rt.db, pr_key)
    if view is None or not view.pr.head_sha:
        return
    pr = view.pr
    rnd = await rounds.get(rt.db, pr_key, pr.process_key, pr.current_round) if pr.process_key else None
    left = len(json.loads(rnd.findings)) if rnd is not None and rnd.findings is not None else None
    fields = render(view.derived_status, pr.current_round, pr.max_rounds, left, pr.last_action)
    key = parse_pr_key(pr_key)
    published = rt.extras.setdefault("check_runs", {})
    if published.get(pr_key) == (pr.head_sha, fields):
        return  # nothing new to say: an unchanged PR costs no write
    try:
        if pr.check_run_id and pr.check_run_head == pr.head_sha:
            await rt.github.update_check_run(key.owner, key.repo, pr.check_run_id, **fields)
            published[pr_key] = (pr.head_sha, fields)
            return
        created = await rt.github.create_check_run(key.owner, key.repo, name=CHECK_RUN_NAME,
                                                   head_sha=pr.head_sha, **fields)
    except GitHubError as e:
        log.warning("checkrun.failed", pr_key=pr_key, error=str(e))
        return
    published[pr_key] = (pr.head_sha, fields)
    if pr.process_key:
        await prs.fenced_update(rt.db, pr_key, pr.process_key,
                                {"check_run_id": created["id"], "check_run_head": pr.head_sha})
