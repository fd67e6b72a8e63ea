"""The parts every simulator operation shares: state, git, rendering, webhook emission.

Operations (ops/*.py) are mixins over this base; each public operation takes `self.lock` for its
mutation so a REST write, a control-API call, a real `git push` and a scripted reviewer never
interleave half-way through one another.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .gitstore import Author, Comparison, GitStore
from .headlag import HeadLag
from .ids import iso, now
from .shapes import RenderContext
from .shapes.pulls import DiffStats, Heads, pull_request
from .shapes.repos import repository
from .shapes.users import user
from .state import CheckRun, CommitStatus, PullRequest, Repo, State
from .webhooks import WebhookDispatcher

if TYPE_CHECKING:
    from .reviewer import ReviewerRunner

DEFAULT_TOKEN_USER = "convergebot[bot]"


class SimulatorCore:
    def __init__(self, *, root: Path, webhook_url: str | None, webhook_secret: str | None,
                 token_user: str, cache_heads: bool = True) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.state = State()
        self.git = GitStore(self.root, cache_heads=cache_heads)
        self.ctx = RenderContext(self.state, "http://127.0.0.1/")
        self.webhooks = WebhookDispatcher(webhook_url, webhook_secret)
        self.token_user = token_user
        self.lock = asyncio.Lock()
        self.side_effects: list[dict[str, Any]] = []
        self.ref_updates: list[dict[str, Any]] = []  # every branch move, forced or not
        self.head_lags: dict[tuple[str, int], HeadLag] = {}  # PR objects whose head.sha lags
        self._stats: dict[tuple[str, str], DiffStats] = {}
        # (base, head) -> whether they conflict / whether the base has commits the head lacks;
        # (base, head) -> their comparison. Commits are immutable, so answers are kept.
        self._conflicts: dict[tuple[str, str], bool] = {}
        self._behind: dict[tuple[str, str], bool] = {}
        self._compares: dict[tuple[str, str], Comparison | None] = {}
        self._outdated_cache: dict[tuple[str, str, str, int], bool] = {}

    @property
    def base_url(self) -> str:
        return self.ctx.base_url

    @base_url.setter
    def base_url(self, url: str) -> None:
        self.ctx.base_url = url if url.endswith("/") else url + "/"

    # -- lookups ---------------------------------------------------------------------------

    def repo(self, full_name: str) -> Repo:
        owner, _, name = full_name.partition("/")
        return self.state.repo(owner, name)

    def pr(self, full_name: str, number: int) -> tuple[Repo, PullRequest]:
        repo = self.repo(full_name)
        return repo, self.state.pr(repo, number)

    def head_repo(self, repo: Repo, pr: PullRequest) -> Repo:
        """The repository holding the PR's head branch: a fork's, for a PR from a fork."""
        return self.repo(pr.head_repo) if pr.head_repo else repo

    def author(self, login: str) -> Author:
        u = self.state.user(login)
        return Author(login, f"{u.id}+{login}@users.noreply.simulator")

    # -- git reads (a real push must be visible at once: the ref cache re-checks the ref
    # files on every read, see refcache.py) -------------------------------------------------

    async def heads(self, repo: Repo, pr: PullRequest,
                    branches: dict[str, str] | None = None) -> Heads:
        """A PR's current head and base shas; a closed PR keeps the ones it closed with.

        `branches` are the base repository's; a fork's head is read from the fork."""
        if pr.state != "open":
            return Heads(pr.last_head, pr.last_base)
        if branches is None:
            branches = await self.git.heads(repo.git_dir)
        heads = branches if pr.head_repo is None else await self.git.heads(self.head_repo(repo, pr).git_dir)
        return Heads(heads.get(pr.head_ref, pr.last_head),
                     branches.get(pr.base_ref, pr.last_base))

    async def head_sha(self, repo: Repo, pr: PullRequest) -> str:
        return (await self.heads(repo, pr)).head

    async def diff_stats(self, repo: Repo, heads: Heads) -> DiffStats:
        key = (heads.base, heads.head)
        if key not in self._stats:  # commits are immutable, so the numbers are too
            try:
                self._stats[key] = DiffStats(*await self.git.diff_stats(repo.git_dir, *key))
            except Exception:
                self._stats[key] = DiffStats()
        return self._stats[key]

    async def mergeability(self, repo: Repo, pr: PullRequest,
                           heads: Heads) -> tuple[bool | None, str]:
        """(mergeable, mergeable_state) as GitHub computes them: `dirty` when a three-way merge
        of base and head conflicts, `behind` when the base moved on and the repository
        requires branches up to date. What a test set (`set_mergeable`) wins."""
        if pr.state != "open" or pr.mergeable_state is not None:
            return pr.mergeability()
        key = (heads.base, heads.head)
        if key not in self._conflicts:
            try:
                self._conflicts[key] = await self.git.merge_tree(repo.git_dir, *key) is None
            except Exception:  # unrelated histories, a missing object: call it mergeable
                return pr.mergeability()
        behind = False
        if repo.require_up_to_date and not self._conflicts[key]:
            if key not in self._behind:
                self._behind[key] = not await self.git.is_ancestor(repo.git_dir, *key)
            behind = self._behind[key]
        return pr.mergeability(conflicts=self._conflicts[key], behind=behind,
                               checks=self.checks_verdict(repo, heads.head),
                               approved=self.state.review_decision(repo, pr) in (None, "APPROVED"))

    def checks_verdict(self, repo: Repo, sha: str) -> str:
        """What the checks on `sha` say against branch protection: "blocking" while a required
        one has not succeeded (missing, running or failed), "failing" when another failed,
        else "passing". Read from memory on every PR read: checks change without a push."""
        states: dict[str, str] = {}
        for run in self.latest_runs(repo, sha):
            states[run.name] = ("pending" if run.status != "completed" else
                                "success" if run.conclusion in ("success", "neutral", "skipped")
                                else "failure")
        for st in self.latest_statuses(repo, sha):
            states[st.context] = st.state if st.state in ("success", "pending") else "failure"
        if any(states.get(name) != "success" for name in repo.required_checks):
            return "blocking"
        return "failing" if "failure" in states.values() else "passing"

    async def compare(self, repo: Repo, base: str, head: str) -> Comparison | None:
        """GitHub's compare of two commits (None: no common ancestor), kept per pair."""
        key = (base, head)
        if key not in self._compares:
            self._compares[key] = await self.git.compare(repo.git_dir, base, head)
        return self._compares[key]

    async def pr_json(self, repo: Repo, pr: PullRequest, *, full: bool = True,
                      branches: dict[str, str] | None = None, read: bool = False) -> dict:
        """`read`: a PR-object read (GET /pulls/{n}, the list), where a head lag shows."""
        heads = await self.heads(repo, pr, branches)
        if read:
            heads = self._lagged(repo, pr, heads)
        stats = merge = None
        if full:
            stats = await self.diff_stats(repo, heads)
            merge = await self.mergeability(repo, pr, heads)
        return pull_request(self.ctx, repo, pr, heads, full=full, stats=stats,
                            head_repo=self.head_repo(repo, pr), mergeability=merge)

    def _lagged(self, repo: Repo, pr: PullRequest, heads: Heads) -> Heads:
        """The heads a PR-object read shows: the frozen head while a lag lasts (open PRs only)."""
        key = (repo.full_name, pr.number)
        lag = self.head_lags.get(key)
        if lag is None or pr.state != "open":
            return heads
        if lag.read():
            del self.head_lags[key]
        return Heads(lag.sha, heads.base)

    def open_prs_at(self, repo: Repo, sha: str,
                    branches: dict[str, str]) -> list[tuple[PullRequest, str, str]]:
        """Open PRs whose head is `sha` (what check runs and suites list as pull_requests)."""
        found = []
        for pr in self.state.prs_of(repo):
            # GitHub leaves PRs from forks out of a check run's `pull_requests`.
            if pr.state == "open" and pr.head_repo is None and branches.get(pr.head_ref) == sha:
                found.append((pr, sha, branches.get(pr.base_ref, pr.last_base)))
        return found

    # -- webhooks --------------------------------------------------------------------------

    def emit(self, event: str, repo: Repo, sender: str, action: str | None = None,
             **fields: Any) -> None:
        payload: dict[str, Any] = {"action": action} if action else {}
        payload.update(fields)
        payload["repository"] = repository(self.ctx, repo)
        payload["sender"] = user(self.ctx, sender)
        self.webhooks.emit(event, payload)

    async def emit_pr(self, action: str, repo: Repo, pr: PullRequest, sender: str,
                      **extra: Any) -> None:
        self.emit("pull_request", repo, sender, action, number=pr.number,
                  pull_request=await self.pr_json(repo, pr), **extra)

    # -- provided by the ops mixins (ops/repos.py, ops/checks.py, ops/queue.py) and, for the
    # reviewer, by Simulator.__init__; declared here for the mixins that call them

    reviewer: ReviewerRunner

    async def _ref_moved(self, repo: Repo, ref: str, old: str, new: str,
                         pusher: str | None, via: str = "control") -> None:
        raise NotImplementedError

    async def _emit_push(self, repo: Repo, ref: str, old: str, new: str, pusher: str,
                         via: str = "control") -> None:
        raise NotImplementedError

    async def _delete_branch(self, repo: Repo, branch: str, actor: str) -> None:
        raise NotImplementedError  # ops/pulls.py

    def latest_runs(self, repo: Repo, sha: str) -> list[CheckRun]:
        raise NotImplementedError  # ops/checks.py

    def latest_statuses(self, repo: Repo, sha: str) -> list[CommitStatus]:
        raise NotImplementedError  # ops/checks.py

    async def queue_checks_changed(self, repo: Repo, sha: str) -> None:
        raise NotImplementedError  # ops/queue.py

    async def queue_head_moved(self, repo: Repo, pr: PullRequest) -> None:
        raise NotImplementedError  # ops/queue.py

    # -- side effects: what API clients (the bot) changed, for tests to assert on -------------

    def record(self, kind: str, actor: str, **fields: Any) -> None:
        self.side_effects.append({"kind": kind, "actor": actor, "at": iso(now()), **fields})
