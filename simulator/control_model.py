"""What the control API's handlers (`control.py`) use of the model, by the part of the route
table they serve: repositories, pull requests, reviews and comments, faults, observation. The
Simulator is each; the handlers take the narrowest."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from .chaos import ChaosSettings, RequestChaos
from .counters import Counters
from .faults import Fault, Faults
from .headlag import HeadLag
from .shapes import RenderContext
from .state import (
    CheckRun,
    CommitStatus,
    IssueComment,
    MergeQueue,
    PullRequest,
    Repo,
    Review,
    ReviewComment,
    ReviewerScript,
    ReviewThread,
    ThreadSpec,
)
from .webhook_chaos import WebhookChaosSettings
from .webhooks import WebhookDispatcher, WebhookFaults

# What the control handlers use of the model, by the part of the route table they serve (the
# Simulator is each): repositories, pull requests, reviews and comments, faults, observation.


class RepoControl(Protocol):
    async def create_repo(self, full_name: str, *, default_branch: str = "main",
                          files: dict[str, str] | None = None,
                          collaborators: dict[str, str] | None = None,
                          description: str | None = None, private: bool = False) -> Repo: ...

    async def fork_repo(self, source: str, owner: str) -> Repo: ...

    async def set_permission(self, repo_name: str, login: str, role: str | None) -> None: ...

    async def push(self, repo_name: str, branch: str, files: dict[str, str | None], *,
                   message: str = "Update files", author: str | None = None,
                   start: str | None = None) -> str: ...

    async def refs_pushed(self, repo_name: str, updates: list[tuple[str, str, str]],
                          pusher: str | None = None) -> None: ...

    def set_required_checks(self, repo_name: str, names: list[str]) -> None: ...

    async def require_up_to_date(self, repo_name: str, on: bool = True) -> None: ...

    async def require_merge_queue(self, repo_name: str, branch: str | None = None, *,
                                  checks: list[str] | tuple[str, ...] = (),
                                  required: bool = True) -> MergeQueue | None: ...

    async def set_check_run(self, repo_name: str, ref: str, name: str, *,
                            status: str = "completed", conclusion: str | None = "success",
                            app: str = "github-actions", **fields: Any) -> CheckRun: ...

    async def set_status(self, repo_name: str, ref: str, state: str, *,
                         context: str = "default", description: str | None = None,
                         target_url: str | None = None,
                         user: str = "github-actions[bot]") -> CommitStatus: ...


class PullControl(Protocol):
    def repo(self, full_name: str) -> Repo: ...

    async def pr_json(self, repo: Repo, pr: PullRequest, *, full: bool = True,
                      branches: dict[str, str] | None = None, read: bool = False) -> dict: ...

    async def open_pr(self, repo_name: str, *, title: str, head: str, base: str | None = None,
                      files: Mapping[str, str | None] | None = None, body: str | None = "",
                      author: str = "octocat", labels: Iterable[str] = (), draft: bool = False,
                      message: str | None = None,
                      reviewers: Iterable[ReviewerScript] = (), head_repo: str | None = None,
                      maintainer_can_modify: bool = False) -> PullRequest: ...

    async def close_pr(self, repo_name: str, number: int, *, actor: str | None = None) -> None: ...

    async def reopen_pr(self, repo_name: str, number: int, *,
                        actor: str | None = None) -> None: ...

    async def merge_pr(self, repo_name: str, number: int, *, method: str = "merge",
                       sha: str | None = None, actor: str | None = None,
                       commit_title: str | None = None,
                       commit_message: str | None = None) -> dict: ...

    async def add_labels(self, repo_name: str, number: int, labels: Iterable[str], *,
                         actor: str) -> list[str]: ...

    async def set_mergeable(self, repo_name: str, number: int, state: str | None) -> None: ...

    async def request_reviewers(self, repo_name: str, number: int, reviewers: Iterable[str], *,
                                actor: str) -> PullRequest: ...

    def set_reviewer(self, repo_name: str, script: ReviewerScript,
                     number: int | None = None) -> None: ...

    async def lag_pr_head(self, repo: str, number: int, *,
                          reads: int | None = None) -> HeadLag: ...

    def release_pr_head(self, repo: str, number: int) -> bool: ...

    def head_lag(self, repo: str, number: int) -> HeadLag | None: ...


class ReviewControl(Protocol):
    ctx: RenderContext

    def repo(self, full_name: str) -> Repo: ...

    async def submit_review(self, repo_name: str, number: int, *, user: str, body: str = "",
                            state: str = "COMMENTED",
                            threads: Iterable[ThreadSpec | dict] = (),
                            commit_id: str | None = None) -> Review: ...

    async def reply(self, repo_name: str, number: int, comment_id: int, *, body: str,
                    user: str) -> ReviewComment: ...

    async def resolve_thread(self, node_id: str, *, user: str,
                             resolved: bool = True) -> ReviewThread: ...

    async def comment(self, repo_name: str, number: int, body: str, *,
                      user: str) -> IssueComment: ...

    async def edit_comment(self, repo_name: str, comment_id: int, body: str, *,
                           user: str | None = None) -> IssueComment: ...

    async def delete_comment(self, repo_name: str, comment_id: int, *,
                             user: str | None = None) -> None: ...


class FaultControl(Protocol):
    """Request faults and chaos; webhook delivery: its target, faults and chaos."""

    faults: Faults
    request_chaos: RequestChaos
    webhooks: WebhookDispatcher

    def inject_fault(self, path: str, **options: Any) -> Fault: ...

    def clear_faults(self, fault_id: int | None = None) -> None: ...

    def chaos(self, seed: int, *, error_rate: float = 0.0, rate_limit_rate: float = 0.0,
              secondary_rate: float = 0.0, retry_after: int = 1, slow_rate: float = 0.0,
              slow_seconds: float = 0.5, lost_ack_rate: float = 0.0,
              exclude: tuple[str, ...] | list[str] = ()) -> ChaosSettings: ...

    def chaos_off(self) -> None: ...

    def configure_webhooks(self, url: str | None, secret: str | None = None, *,
                           senders: int | None = None) -> None: ...

    def webhook_faults(self, **options: Any) -> WebhookFaults: ...

    def webhook_chaos(self, seed: int, **rates: float) -> WebhookChaosSettings: ...

    def webhook_chaos_off(self) -> None: ...


class Observation(Protocol):
    """What happened (deliveries, branch moves, side effects, counters, the state), and
    waiting for the model to settle."""

    webhooks: WebhookDispatcher
    counters: Counters
    ref_updates: list[dict[str, Any]]
    side_effects: list[dict[str, Any]]

    def forced_pushes(self) -> list[dict]: ...

    def duplicate_effects(self) -> list[dict]: ...

    def effects(self, kind: str | None = None) -> list[dict]: ...

    async def dump_state(self) -> dict: ...

    async def settle(self, timeout: float = 15.0) -> None: ...


class ControlModel(RepoControl, PullControl, ReviewControl, FaultControl, Observation, Protocol):
    """Everything the control API uses of the model."""
