"""The restack effect (docs/stacks.md): a PR stacked on another whose parent has landed is
retargeted to the parent's base and its own commits replayed onto it.

Safe to repeat and to lose the answer of: the retarget is skipped once the base is no longer
the parent's branch (GitHub retargets by itself when the parent's branch is deleted, and that is
taken as it is); the replay starts from the branch as read now, and a head already replayed has
no commit of the parent's left to leave behind; the push is leased on the head read, so a commit
someone pushed meanwhile is never overwritten (the job tries again on a fresh read).
"""

from __future__ import annotations

from pathlib import Path

import structlog

from bot.engine.dispatch import requeue
from bot.fixers.environment import GitIdentity
from bot.fixers.restack import Restack, replay
from bot.github.errors import NotFound, Unavailable
from bot.runtime.context import Runtime
from storage import dependencies, prs
from storage.keys import PrKey, ProcessKey, parse_pr_key
from storage.models import Job, utcnow

log = structlog.get_logger(__name__)

GIT_TIMEOUT_SECONDS = 120.0


async def restack(rt: Runtime, job: Job, p: dict) -> None:
    child, pk, parent = prs.pr_key_of(job), prs.process_key_of(job), parse_pr_key(p["parent"])
    bound = log.bind(pr_key=child, parent=parent)
    gh = rt.github.pr(child)
    pr = await gh.read()
    if pr.get("state") != "open":
        await _restacked(rt, child, pk, parent, "closed before its parent's landing was replayed")
        return
    try:
        above = await rt.github.pr(parent).read()
    except NotFound:
        above = {}
    if not above.get("merged"):
        return  # the decision reads again: a parent that did not land keeps the child waiting
    base = pr["base"]["ref"]
    if base == above["head"]["ref"]:
        base = above["base"]["ref"]
        await gh.retarget(base)
        bound.info("stack.retargeted", base=base)
    head_repo = (pr["head"].get("repo") or {})
    if head_repo.get("full_name", child.full_repo).lower() != child.full_repo.lower():
        # A fork's branch: the bot cannot push there; GitHub shows its diff against the new base.
        await _restacked(rt, child, pk, parent, f"retargeted to {base} (a fork's branch is not re-based)")
        return
    branch = pr["head"]["ref"]
    head = await gh.branch_head(branch)
    await _note_children(rt, child, branch, head)
    async with rt.db.read_session() as s:
        noted = [e.fork_point for e in await dependencies.stacked_on(s, child) if e.parent == parent]
    fork_points = (*(f for f in noted if f), await gh.merge_base(above["head"]["sha"], head))
    identity, timeout, workdir = _git_settings(rt)
    done = await replay(Restack(head_repo.get("clone_url") or "", await gh.clone_token(), branch, head, base,
                                fork_points), identity=identity, git_timeout=timeout, workdir_root=workdir)
    if done.outcome == "rejected":
        raise Unavailable(f"restack: {branch} moved while its commits were replayed; reading it again")
    said = {"pushed": f"re-based its own commits onto {base} ({(done.head or '')[:7]})",
            "nothing": f"retargeted to {base}: no commit of {parent}'s to leave behind",
            "conflict": f"retargeted to {base}: its commits do not replay cleanly onto it "
                        f"({', '.join(done.files) or 'files not named'}); the merge stage's conflict round follows"}
    await _restacked(rt, child, pk, parent, said[done.outcome])
    bound.info("stack.restacked", outcome=done.outcome, base=base, head=head, new_head=done.head,
               fork_point=done.fork_point, files=list(done.files))


async def _note_children(rt: Runtime, pr_key: PrKey, branch: str, head: str) -> None:
    """Before this PR's history is rewritten: the PRs stacked on its branch (enrolled or not,
    converged or not), each with where its own commits begin, which afterwards no comparison
    with the branch could say."""
    async with rt.db.read_session() as s:
        noted = {e.child for e in await dependencies.stacked_children(s, pr_key) if e.fork_point}
    for above in await rt.github.pr(pr_key).open_pulls_based(branch):
        child = PrKey.of(pr_key.owner, pr_key.repo, above["number"])
        if child in noted:
            continue
        fork = await rt.github.pr(pr_key).merge_base(head, above["head"]["sha"])
        async with rt.db.session() as s:
            await dependencies.record_stack(s, child, pr_key, fork)


async def _restacked(rt: Runtime, child: PrKey, pk: ProcessKey, parent: PrKey, said: str) -> None:
    async with rt.db.session() as s:
        if await dependencies.mark_restacked(s, child, parent, utcnow()):
            await prs.fenced_update(None, child, pk, {"last_action": said}, session=s)
            await requeue(s, child, "restacked")


def _git_settings(rt: Runtime) -> tuple[GitIdentity, float, Path | None]:
    """The fixer's git identity, deadline and work directory, where `serve` built one."""
    fixer = rt.fixer
    identity = getattr(fixer, "identity", None)
    return (identity if isinstance(identity, GitIdentity) else GitIdentity(),
            float(getattr(fixer, "git_timeout_seconds", GIT_TIMEOUT_SECONDS)),
            getattr(fixer, "workdir_root", None))
