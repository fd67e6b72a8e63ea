"""Scripted reviewers: bots that answer review requests with the next step of their script.

A reviewer starts when a review is requested from its login, when a PR comment holds its
`trigger` (a comment-triggered bot such as CodeRabbit), or, with `auto`, whenever the PR opens or
its head moves (a bot that reviews every push by itself). It notes the head it was asked to review, waits `delay` seconds, and submits its
review of THAT commit, so a push during the delay yields a stale review, as on GitHub.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Protocol

import structlog

from .state import PullRequest, Repo, Review, ReviewerScript, ThreadSpec

log = structlog.get_logger("simulator.reviewer")


class Reviews(Protocol):
    """What a scripted reviewer does to a PR: read its head, then review it (the Simulator)."""

    async def head_sha(self, repo: Repo, pr: PullRequest) -> str: ...

    async def submit_review(self, repo_name: str, number: int, *, user: str, body: str = "",
                            state: str = "COMMENTED",
                            threads: Iterable[ThreadSpec | dict] = (),
                            commit_id: str | None = None) -> Review: ...


class ReviewerRunner:
    def __init__(self, sim: Reviews) -> None:
        self.sim = sim
        self._tasks: dict[tuple[str, int, str], asyncio.Task] = {}

    @staticmethod
    def script_for(repo: Repo, pr: PullRequest, login: str) -> ReviewerScript | None:
        for script in (*pr.reviewers, *repo.reviewers):  # the PR's own script wins
            if script.login.lower() == login.lower():
                return script
        return None

    def pending(self, repo: Repo, pr: PullRequest, login: str) -> bool:
        task = self._tasks.get((repo.full_name, pr.number, login))
        return task is not None and not task.done()

    def requested(self, repo: Repo, pr: PullRequest, login: str) -> None:
        """A review was requested from `login`: start its script unless it is already busy."""
        script = self.script_for(repo, pr, login)
        if script is None or self.pending(repo, pr, login):
            return
        self._start(repo, pr, script)

    def commented(self, repo: Repo, pr: PullRequest, body: str) -> None:
        """A PR comment was posted: a script whose `trigger` it holds starts unless it is busy
        (a second trigger while it reviews starts nothing, as the bots ignore it)."""
        text = body.lower()
        for script in {s.login: s for s in (*repo.reviewers, *pr.reviewers)}.values():
            if script.trigger and script.trigger.lower() in text and not self.pending(repo, pr, script.login):
                self._start(repo, pr, script)

    def head_moved(self, repo: Repo, pr: PullRequest) -> None:
        """The head moved (or the PR opened): `auto` reviewers review it unasked."""
        for script in {s.login: s for s in (*repo.reviewers, *pr.reviewers)}.values():
            if script.auto and not self.pending(repo, pr, script.login):
                if script.login not in pr.requested_reviewers:
                    pr.requested_reviewers.append(script.login)
                self._start(repo, pr, script)

    def cancel(self, repo: Repo, pr: PullRequest, login: str) -> None:
        task = self._tasks.pop((repo.full_name, pr.number, login), None)
        if task is not None:
            task.cancel()

    def _start(self, repo: Repo, pr: PullRequest, script: ReviewerScript) -> None:
        key = (repo.full_name, pr.number, script.login)
        self._tasks[key] = asyncio.get_running_loop().create_task(
            self._review(repo, pr, script), name=f"sim-reviewer-{pr.number}-{script.login}")

    async def _review(self, repo: Repo, pr: PullRequest, script: ReviewerScript) -> None:
        try:
            commit = await self.sim.head_sha(repo, pr)  # the head it was asked to review
            await asyncio.sleep(script.delay)
            if pr.state != "open":
                return
            used = pr.review_rounds.get(script.login, 0)
            pr.review_rounds[script.login] = used + 1
            step = script.steps[min(used, len(script.steps) - 1)] if script.steps else None
            await self.sim.submit_review(
                repo.full_name, pr.number, user=script.login,
                body=step.body if step else "", state=step.state if step else "COMMENTED",
                threads=step.threads if step else (), commit_id=commit)
            log.info("scripted review submitted", pr=f"{repo.full_name}#{pr.number}",
                     reviewer=script.login, step=used + 1, commit=commit)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("scripted reviewer failed", reviewer=script.login)

    def busy(self) -> bool:
        return any(not t.done() for t in self._tasks.values())

    async def idle(self, timeout: float = 30.0) -> None:
        """Wait until no scripted review is in flight."""
        async with asyncio.timeout(timeout):
            while any(not t.done() for t in self._tasks.values()):
                await asyncio.gather(*[t for t in self._tasks.values() if not t.done()],
                                     return_exceptions=True)

    async def aclose(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()
