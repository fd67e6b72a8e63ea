"""The enroll job: a label or an auto-enroll author seen in a webhook, confirmed on GitHub."""

from __future__ import annotations

import json

from bot.config import ConvergenceConfig
from bot.engine import repoconfig
from bot.engine.dispatch import requeue
from bot.engine.submit import SubmitOptions, submit_pr
from bot.runtime.context import Runtime
from storage import prs
from storage.models import Job


def enroll_rule(pr: dict, cfg: ConvergenceConfig) -> str | None:
    """Why an open PR (GitHub's shape) enrolls itself: "label" (it carries the enroll label),
    "auto" (an auto-enroll author's), or None. The enroll job and the repository scan ask."""
    if pr.get("state") != "open":
        return None
    if cfg.label in {(label or {}).get("name") or "" for label in pr.get("labels") or []}:
        return "label"
    author = ((pr.get("user") or {}).get("login") or "").lower()
    return "auto" if author in {a.lower() for a in cfg.auto_enroll_authors} else None


async def enroll(rt: Runtime, job: Job) -> None:
    key = prs.pr_key_of(job)
    pr = await rt.github.pr(key).read()
    cfg = rt.config.convergence
    rule = enroll_rule(pr, cfg)
    if rule is None:
        return
    # The enroll label and authors are the global ones (webhooks are routed on them before any
    # repository file is read); the run's settings are the repository's.
    cfg = (await repoconfig.effective_config(rt, key.full_repo)).convergence
    author = ((pr.get("user") or {}).get("login") or "").lower()
    result = await submit_pr(rt.db, key, SubmitOptions(
        max_rounds=cfg.max_rounds, converge_only=not cfg.merge, submitted_by=rule,
        title=pr.get("title"), url=pr.get("html_url"), head_branch=(pr.get("head") or {}).get("ref"),
        author=author or None, only_if_new=bool(json.loads(job.payload or "{}").get("only_if_new"))))
    if result.outcome == "started":
        async with rt.db.session() as s:
            await requeue(s, key, f"enrolled:{result.process_key}", once=True)
        rt.wake_workers()
