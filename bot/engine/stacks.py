"""Stacked PRs (docs/stacks.md): a PR whose base branch is another open PR's head branch
depends on that PR, waits for it to land, and is then re-based off it (bot/effects/restack.py).

The edge is recorded while the parent is still open: at each step of an enrolled PR whose base
is not its repository's default branch, looked up once per PR and base branch in this process
(a PR based on a long-lived branch costs one read, not one per step). A parent found only after
it landed is not taken for one: its branch may be a long-lived one another PR once merged from.
"""

from __future__ import annotations

from dataclasses import replace

from bot.engine.dispatch import requeue
from bot.engine.submit import Outcome, SubmitOptions, submit_pr
from bot.github.errors import NotFound
from bot.runtime.context import Runtime
from storage import dependencies
from storage.keys import PrKey
from storage.models import PullRequest

MAX_DEPTH = 20  # PRs below the one enrolled with `--stack` that are followed


async def note(rt: Runtime, pr: PullRequest, gh_pr: dict) -> None:
    """Record the PR's stack edge when its base branch is another open PR's head branch (the
    step's, before its merge stage reads the edges: `to_restack`)."""
    base = gh_pr.get("base") or {}
    ref = base.get("ref") or ""
    if not ref or ref == (base.get("repo") or {}).get("default_branch"):
        return
    seen = (pr.pr_key, ref)
    if seen in rt.stack_bases:
        rt.stack_bases.move_to_end(seen)
        return
    parent = await _headed_by(rt, pr.pr_key, ref)
    if parent is not None:
        async with rt.db.session() as s:
            await dependencies.record_stack(s, pr.pr_key, parent)
    rt.stack_bases[seen] = parent  # the least recently used goes past its bound (`Runtime`)


async def to_restack(rt: Runtime, pr: PullRequest, gh_pr: dict) -> dict[PrKey, bool]:
    """The parents the PR is still to be re-based off, each with whether it has landed, as just
    read from GitHub (the merge stage's read of its dependencies takes that answer). An edge whose
    child was moved off the parent's branch before the parent landed is forgotten."""
    ref = (gh_pr.get("base") or {}).get("ref") or ""
    async with rt.db.read_session() as s:
        edges = [e for e in await dependencies.stacked_on(s, pr.pr_key) if e.restacked_at is None]
    parents = {}
    for edge in edges:
        try:
            above = await rt.github.pr(edge.parent).read()
        except NotFound:
            above = {}
        branch = (above.get("head") or {}).get("ref") or ""
        if above.get("state") == "open" and branch != ref:
            async with rt.db.session() as s:  # moved off the parent's branch by someone
                await dependencies.drop_stack(s, pr.pr_key, edge.parent)
            # What was looked up for that branch is forgotten with the edge: a child moved back
            # onto it is stacked on it again.
            rt.stack_bases.pop((pr.pr_key, branch), None)
            continue
        parents[edge.parent] = bool(above.get("merged"))
    return parents


async def _headed_by(rt: Runtime, key: PrKey, branch: str) -> PrKey | None:
    """The open PR of the repository whose head branch is `branch`, if there is one."""
    for pull in await rt.github.pr(key).open_pulls_headed(branch):
        repo = ((pull.get("head") or {}).get("repo") or {}).get("full_name") or ""
        if pull.get("number") != key.number and repo.lower() == key.full_repo.lower():
            return PrKey.of(key.owner, key.repo, pull["number"])
    return None


async def below(rt: Runtime, key: PrKey) -> list[PrKey]:
    """The open PRs the PR is stacked on, bottom first, each edge recorded: its base branch's
    PR, that one's, and so on down to a PR based on the default branch (or not on a PR)."""
    found: list[PrKey] = []
    child = key
    while len(found) < MAX_DEPTH:
        pull = await rt.github.pr(child).read()
        base = pull.get("base") or {}
        ref = base.get("ref") or ""
        if pull.get("state") != "open" or not ref or ref == (base.get("repo") or {}).get("default_branch"):
            break
        parent = await _headed_by(rt, child, ref)
        if parent is None or parent == key or parent in found:
            break
        async with rt.db.session() as s:
            await dependencies.record_stack(s, child, parent)
        found.insert(0, parent)
        child = parent
    return found


async def enroll_below(rt: Runtime, key: PrKey, opts: SubmitOptions) -> list[PrKey]:
    """`--stack`: enroll every PR the PR is stacked on with its options (not its explicit
    dependencies: those are its own); the PRs a run was started for, bottom first."""
    started = []
    for parent in await below(rt, key):
        result = await submit_pr(rt.db, parent, replace(opts, depends_on=()))
        if result.outcome == Outcome.STARTED:
            async with rt.db.session() as s:
                await requeue(s, parent, f"stack:{result.process_key}", once=True)
            started.append(parent)
    return started
