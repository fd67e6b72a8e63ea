"""The process's shared parts, wired once in `serve` (and the demo) and handed to handlers."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from bot import metrics
from bot.config import Config
from bot.github.client import GitHubClient, http_cache_sizes
from bot.github.ratebudget import RateBudget
from bot.runtime.leadership import Leadership
from bot.runtime.workers import Reschedule
from storage.database import Database
from storage.keys import PrKey
from storage.locks import KeyedLocks
from storage.models import utcnow

if TYPE_CHECKING:  # made and kept by their own modules, which import this one
    from bot.engine.repoconfig import RepoConfigs
    from bot.fixers.base import Fixer
    from bot.intake.batch import Intake
    from bot.intake.redelivery import RedeliveryState
    from bot.intake.routing import EnrollRules

# How soon a step put off because another replica is stepping the same PR runs again.
TURN_RETRY_SECONDS = 0.5


class Bounded(OrderedDict):
    """A dict that keeps its `size` most recently written keys: a process's memory of something
    it can read again (after a restart it holds nothing, and loses nothing but a read or a write)."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, value)
        self.move_to_end(key)
        while len(self) > self.size:
            self.popitem(last=False)


CHECK_RUNS_REMEMBERED = 10_000  # PRs whose last check-run text this process remembers
PROTECTED_CHECKS_REMEMBERED = 10_000  # (PR, head)s whose required checks this process remembers
STACK_BASES_REMEMBERED = 10_000  # (PR, base branch)es looked up for a PR heading the base


class OwnPushes:
    """The heads our fixer runs pushed, per repository, newest last (a bounded memory).

    The fixer's workspace tells this the sha right before its push, so the push's own webhooks
    (`push`, `pull_request` `synchronize`), which may arrive before the push command returns, are
    known as echoes: the fix job's progress check reads the branch anyway. Kept in memory: after
    a restart those webhooks wake a sync again, which costs reads and loses nothing.
    """

    def __init__(self, size: int = 4096) -> None:
        self._seen = Bounded(size)

    def add(self, repo: str, sha: str) -> None:
        self._seen[(repo.lower(), sha)] = None

    def __contains__(self, item: object) -> bool:
        return item in self._seen

    def __len__(self) -> int:
        return len(self._seen)


@dataclass
class Health:
    started_at: datetime | None = None
    last_poll_at: datetime | None = None
    last_poll_error: str | None = None
    scheduler_running: bool = False
    runaway: list[PrKey] = field(default_factory=list)  # PRs paused at their write budget
    leader: bool | None = None  # whether this replica ran the last poll itself (None: not asked yet)
    database_unreachable: bool = False  # /readyz's last look at the database failed


@dataclass
class Runtime:
    config: Config
    db: Database
    github: GitHubClient
    health: Health = field(default_factory=Health)
    wake: Callable[[float], None] | None = None
    step_locks: KeyedLocks = field(default_factory=KeyedLocks)
    # The fixer `serve` built from `[fixer]` (None in a process that runs none: the CLI's).
    fixer: Fixer | None = None
    # What this process remembers, each kept by the module named: the check run it last wrote
    # per PR, (head, fields) (engine/check_summary.py); protected branches' required checks per
    # (PR, head) (engine/merge_stage.py); repositories whose base takes merges through a queue
    # (engine/merge_queue.py); repositories' own config files (engine/repoconfig.py); the
    # redelivery's state (intake/redelivery.py); the webhook intake and its routing rules
    # (intake/webhook.py); the fixer's own pushes (`OwnPushes`, above); when this process's last
    # reading scan began, time.monotonic() (intake/scan.py); which (PR, base branch)es were
    # looked up for an open PR heading that branch, with what was found (engine/stacks.py).
    check_runs: dict[PrKey, tuple[str, dict]] = field(default_factory=lambda: Bounded(CHECK_RUNS_REMEMBERED))
    protected_checks: OrderedDict[tuple[PrKey, str], frozenset[str]] = field(
        default_factory=lambda: Bounded(PROTECTED_CHECKS_REMEMBERED))
    stack_bases: OrderedDict[tuple[PrKey, str], PrKey | None] = field(
        default_factory=lambda: Bounded(STACK_BASES_REMEMBERED))
    merge_queue_repos: set[str] = field(default_factory=set)
    repo_configs: RepoConfigs | None = None
    redelivery: RedeliveryState | None = None
    webhook_intake: Intake | None = None
    webhook_rules: tuple[Config, EnrollRules] | None = None
    own_pushes: OwnPushes = field(default_factory=OwnPushes)
    scan_started_at: float | None = None
    # A step of a PR whose GitHub reads are unchanged and that has nothing due skips its
    # decision (engine/step.py); bench/idle_poll.py turns it off to measure the old way.
    skip_unchanged: bool = True
    # The GitHub client's rate-limit budget (one per client: one installation or token), paced
    # by `[github] reserve_fraction` over poll intervals. The poller reads it as `rt.rate_budget`.
    rate_budget: RateBudget = None  # type: ignore[assignment]  # set in __post_init__
    # Whether this replica runs the periodic duties (poller, scans, redelivery) right now.
    leadership: Leadership = None  # type: ignore[assignment]  # set in __post_init__
    # When a step last read each PR from GitHub in full (time.monotonic()): the poller leaves
    # out a PR read within `[poller] fresh_read_seconds`.
    read_at: dict[PrKey, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.config.github.dry_run:
            # The client's own refusal of writes: a write path the dry run missed fails loudly.
            self.github.dry_run = True
        if self.rate_budget is None:
            self.rate_budget = getattr(self.github, "rate_budget", None) or RateBudget()
        self.rate_budget.configure(reserve_fraction=self.config.github.reserve_fraction,
                                   slice_seconds=self.config.poller.interval_seconds)
        metrics.track_rate_budget(self.rate_budget)
        if self.leadership is None:
            self.leadership = Leadership(self.db)
        self._track_memory()

    def _track_memory(self) -> None:
        """Every map this process keeps, sized on /metrics (`convergebot_memory_entries`): each is
        bounded by a count or by the PRs still driven, and a soak shows whether it levels off."""
        for name, sized in (("check_runs", self.check_runs), ("protected_checks", self.protected_checks),
                            ("read_at", self.read_at), ("step_locks", self.step_locks),
                            ("own_pushes", self.own_pushes), ("merge_queue_repos", self.merge_queue_repos),
                            ("stack_bases", self.stack_bases)):
            metrics.track_memory(name, sized.__len__)
        metrics.track_memory("repo_configs", lambda: len(self.repo_configs.entries) if self.repo_configs else 0)
        gh = getattr(self.github, "gh", None)
        metrics.track_http_cache((lambda: http_cache_sizes(gh)) if gh is not None else lambda: (0, 0))

    @property
    def webhook_secret(self) -> str:
        return self.config.github.webhook_secret.get_secret_value()

    @asynccontextmanager
    async def pr_turn(self, pr_key: PrKey) -> AsyncIterator[None]:
        """The PR's turn: its step or progress check runs alone, across replicas too.

        In this process the per-PR asyncio lock orders them; across processes the PR's
        advisory lock on PostgreSQL (`Database.exclusive`). A replica that finds another one
        holding it puts its job off by `TURN_RETRY_SECONDS` instead of waiting with a worker
        and a connection: the other's step is reading the same PR.
        """
        async with self.step_locks.hold(pr_key), self.db.exclusive(f"pr:{pr_key}") as mine:
            if not mine:
                raise Reschedule(utcnow() + timedelta(seconds=TURN_RETRY_SECONDS),
                                 "another replica is stepping this PR")
            yield

    def wake_workers(self, delay_seconds: float = 0.0) -> None:
        """Tell the job workers that work was queued, due in `delay_seconds`."""
        if self.wake is not None:
            self.wake(delay_seconds)


JobHandler = Callable[[Any], Awaitable[None]]
