"""The process's shared parts, wired once in `serve` (and the demo) and handed to handlers."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from storage.database import Database
from storage.locks import KeyedLocks

from .config import Config
from .github.client import GitHubClient


@dataclass
class Health:
    started_at: datetime | None = None
    last_poll_at: datetime | None = None
    last_poll_error: str | None = None
    scheduler_running: bool = False
    runaway: list[str] = field(default_factory=list)  # PRs paused at their write budget


@dataclass
class Runtime:
    config: Config
    db: Database
    github: GitHubClient
    health: Health = field(default_factory=Health)
    wake: Callable[[], None] | None = None
    extras: dict[str, Any] = field(default_factory=dict)
    step_locks: KeyedLocks = field(default_factory=KeyedLocks)

    @property
    def webhook_secret(self) -> str:
        return self.config.github.webhook_secret.get_secret_value()

    def wake_workers(self) -> None:
        if self.wake is not None:
            self.wake()


JobHandler = Callable[[Any], Awaitable[None]]
