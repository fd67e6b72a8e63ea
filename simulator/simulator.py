"""The `Simulator`: a stateful fake GitHub, driven from Python or served over HTTP (app.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .chaos import ChaosSettings, RequestChaos
from .core import DEFAULT_TOKEN_USER
from .counters import Counters
from .duplicates import duplicate_effects
from .faults import Fault, Faults
from .headlag import HeadLag
from .ids import iso
from .installations import Installation, Installations
from .ops.checks import CheckOps
from .ops.comments import CommentOps
from .ops.merges import MergeOps
from .ops.pulls import PullOps
from .ops.queue import QueueOps
from .ops.repos import RepoOps
from .ops.reviews import ReviewOps
from .ratelimit import RateLimiter
from .reviewer import ReviewerRunner
from .webhook_chaos import WebhookChaosSettings
from .webhooks import Delivery, WebhookFaults


class Simulator(RepoOps, PullOps, MergeOps, ReviewOps, CommentOps, CheckOps, QueueOps):
    """Fake GitHub state with real git branches. Serve it (SimulatorServer, or `build_app` for
    the ASGI app alone) or call the operations directly; both send the same webhooks.

    `tokens`: None accepts any (or no) token as `token_user`; a set accepts those tokens as
    `token_user`; a mapping names the user of each token. Anything else answers 401.
    `cache_heads=False` reads every ref from git (see refcache.py; also `sim.git.cache_heads`).
    """

    def __init__(self, *, root: Path, webhook_url: str | None = None,
                 webhook_secret: str | None = None,
                 tokens: set[str] | Mapping[str, str] | None = None,
                 token_user: str = DEFAULT_TOKEN_USER, rate_limit: int = 5000,
                 cache_heads: bool = True) -> None:
        super().__init__(root=root, webhook_url=webhook_url, webhook_secret=webhook_secret,
                         token_user=token_user, cache_heads=cache_heads)
        self.tokens = tokens
        # The App's installations (one reaching every repository unless a test adds some), and
        # the installation tokens handed to App-auth clients (token -> installation id).
        self.installations = Installations()
        self.issued_tokens: dict[str, int] = self.installations.tokens
        self.faults = Faults()
        self.request_chaos = RequestChaos()
        self.counters = Counters()
        self.rate_limits = RateLimiter(rate_limit)
        self.reviewer = ReviewerRunner(self)
        self.closing = asyncio.Event()  # set on shutdown; releases requests held by `drop`

    async def aclose(self) -> None:
        self.closing.set()
        await self.reviewer.aclose()
        await self.webhooks.aclose()

    async def __aenter__(self) -> Simulator:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def token_actor(self, token: str | None) -> str | None:
        """The login a token acts as, or None when it must be refused (401)."""
        if self.tokens is None or token in self.issued_tokens:
            return self.token_user
        if isinstance(self.tokens, Mapping):
            return self.tokens.get(token) if token else None
        return self.token_user if token in self.tokens else None

    def add_installation(self, owner: str, installation_id: int | None = None) -> Installation:
        """Install the App on `owner` (an org or user): its tokens then reach that owner's
        repositories only, and each installation added reaches its own owner's (see
        installations.py). Returns it, with its id."""
        return self.installations.add(owner, installation_id)

    # -- faults, webhooks, observation -----------------------------------------------------

    def inject_fault(self, path: str, **options: Any) -> Fault:
        """See `Fault`: e.g. `inject_fault(r"/pulls/\\d+$", method="GET", status=502, count=2)`."""
        return self.faults.add(path, **options)

    def clear_faults(self, fault_id: int | None = None) -> None:
        self.faults.clear(fault_id)

    def chaos(self, seed: int, *, error_rate: float = 0.0, rate_limit_rate: float = 0.0,
              secondary_rate: float = 0.0, retry_after: int = 1, slow_rate: float = 0.0,
              slow_seconds: float = 0.5, lost_ack_rate: float = 0.0,
              exclude: tuple[str, ...] | list[str] = ()) -> ChaosSettings:
        """Fault REST and GraphQL requests at random by rate, from `random.Random(seed)`.

        Starts a fresh run (new Random, zeroed counts). Injected faults take precedence; the
        control API and GET /rate_limit are never faulted. See docs/simulator.md.
        """
        settings = ChaosSettings(seed, error_rate=error_rate, rate_limit_rate=rate_limit_rate,
                                 secondary_rate=secondary_rate, retry_after=retry_after,
                                 slow_rate=slow_rate, slow_seconds=slow_seconds,
                                 lost_ack_rate=lost_ack_rate, exclude=tuple(exclude))
        self.request_chaos.start(settings)
        return settings

    def chaos_off(self) -> None:
        """Stop request chaos; `chaos_counts` keeps what it did."""
        self.request_chaos.stop()

    @property
    def chaos_counts(self) -> dict[str, int]:
        """Faults request chaos applied, by kind: error, rate_limit, secondary, slow, lost_ack."""
        return dict(self.request_chaos.counts)

    def webhook_chaos(self, seed: int, **rates: float) -> WebhookChaosSettings:
        """Drop, duplicate, reorder and delay deliveries at random (drop_rate, duplicate_rate,
        reorder_rate, reorder_window, delay_max), from `random.Random(seed)`."""
        settings = WebhookChaosSettings(seed, **rates)
        self.webhooks.chaos.start(settings)
        return settings

    def webhook_chaos_off(self) -> None:
        self.webhooks.chaos.stop()

    @property
    def webhook_chaos_counts(self) -> dict[str, int]:
        """Deliveries webhook chaos changed, by kind: dropped, duplicated, reordered, delayed."""
        return dict(self.webhooks.chaos.counts)

    # -- a PR object whose head lags its branch -------------------------------------------

    async def lag_pr_head(self, repo: str, number: int, *, reads: int | None = None) -> HeadLag:
        """Freeze the PR object's `head.sha` (GET /pulls/{n} and the PR list) at the branch's
        current head, while the branch ref goes on moving: until `release_pr_head`, or for the
        next `reads` reads of the PR object (the one after sees the branch). Calling it again
        replaces the lag with one at the branch's head now. Open PRs only."""
        repo_obj, pr = self.pr(repo, number)
        async with self.lock:
            lag = HeadLag(await self.head_sha(repo_obj, pr), reads)
            self.head_lags[(repo_obj.full_name, pr.number)] = lag
        return lag

    def release_pr_head(self, repo: str, number: int) -> bool:
        """End a head lag: the PR object reads its head from the branch again. False if none."""
        repo_obj, pr = self.pr(repo, number)
        return self.head_lags.pop((repo_obj.full_name, pr.number), None) is not None

    def head_lag(self, repo: str, number: int) -> HeadLag | None:
        repo_obj, pr = self.pr(repo, number)
        return self.head_lags.get((repo_obj.full_name, pr.number))

    def configure_webhooks(self, url: str | None, secret: str | None = None, *, senders: int | None = None) -> None:
        """Where deliveries go, signed with `secret`; `senders`: how many are sent side by side."""
        self.webhooks.configure(url, secret, senders=senders)

    def webhook_faults(self, **options: Any) -> WebhookFaults:
        """Set delivery faults (drop_all, drop_next, duplicate_next, reorder_next, ...)."""
        faults = self.webhooks.faults
        for name, value in options.items():
            if not hasattr(faults, name):
                raise TypeError(f"unknown webhook fault {name!r}")
            setattr(faults, name, type(getattr(faults, name))(value))
        return faults

    @property
    def deliveries(self) -> list[Delivery]:
        return self.webhooks.deliveries

    def effects(self, kind: str | None = None) -> list[dict]:
        return [e for e in self.side_effects if kind is None or e["kind"] == kind]

    def duplicate_effects(self) -> list[dict]:
        """Writes made more than once where once was meant (see duplicates.py); a bot that is
        idempotent under retries and lost acknowledgements leaves this empty."""
        return duplicate_effects(self.side_effects, self.state)

    def forced_pushes(self) -> list[dict]:
        """Branch moves that were not fast-forwards (from `ref_updates`)."""
        return [u for u in self.ref_updates if u["forced"]]

    async def settle(self, timeout: float = 15.0) -> None:
        """Wait until no scripted review is in flight and every webhook has been attempted."""
        async with asyncio.timeout(timeout):
            while True:
                await self.reviewer.idle(timeout)
                await self.webhooks.drain(timeout)
                if not self.reviewer.busy():
                    return

    async def dump_state(self) -> dict:
        """Everything, JSON-ready, with branch heads read from git."""
        s = self.state
        repos = []
        for repo in s.repos.values():
            branches = await self.git.heads(repo.git_dir)
            prs = []
            for pr in s.prs_of(repo):
                heads = await self.heads(repo, pr, branches)
                threads = await self.threads_of(repo, pr)
                prs.append({
                    "number": pr.number, "title": pr.title, "state": pr.state,
                    "merged": pr.merged, "author": pr.user, "head": pr.head_ref,
                    "head_repo": pr.head_repo or repo.full_name,
                    "maintainer_can_modify": pr.maintainer_can_modify,
                    "head_sha": heads.head, "base": pr.base_ref, "base_sha": heads.base,
                    "labels": pr.labels,
                    "mergeable_state": (await self.mergeability(repo, pr, heads))[1],
                    "requested_reviewers": pr.requested_reviewers,
                    "reviews": [{"id": r.id, "user": r.user, "state": r.state,
                                 "commit_id": r.commit_id, "body": r.body}
                                for r in (s.reviews[i] for i in pr.review_ids)],
                    "threads": [{"id": t.node_id, "path": t.path, "line": t.line,
                                 "resolved": t.is_resolved, "outdated": outdated,
                                 "commit_id": t.commit_id,
                                 "comments": [s.review_comments[c].body for c in t.comment_ids]}
                                for t, outdated in threads],
                    "comments": [{"id": c.id, "user": c.user, "body": c.body}
                                 for c in (s.issue_comments[i] for i in pr.issue_comment_ids)],
                })
            repos.append({"full_name": repo.full_name, "fork_of": repo.fork_of,
                          "default_branch": repo.default_branch,
                          "clone_url": repo.git_dir.as_uri(), "branches": branches,
                          "collaborators": repo.collaborators, "pulls": prs})
        return {
            "base_url": self.base_url,
            "repos": repos,
            "check_runs": [{"id": r.id, "repo": r.repo, "head_sha": r.head_sha, "name": r.name,
                            "status": r.status, "conclusion": r.conclusion, "app": r.app}
                           for r in s.check_runs.values()],
            "statuses": [{"id": x.id, "repo": x.repo, "sha": x.sha, "context": x.context,
                          "state": x.state, "created_at": iso(x.created_at)}
                         for x in s.statuses],
            "ref_updates": list(self.ref_updates),
            "head_lags": [{"repo": r, "number": n, **lag.to_dict()}
                          for (r, n), lag in self.head_lags.items()],
        }

    @property
    def hook_endpoint(self) -> str:
        return f"{self.base_url}_sim/hooks/post-receive"
