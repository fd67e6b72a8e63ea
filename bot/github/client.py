"""The one GitHub client: `GitHubClient`, the transport (`transport.py`: how every request is
sent) with the endpoints (`endpoints/`) over it, and how it is opened: githubkit underneath, with
its HTTP cache over one aiohttp pool, on the credential the config names (`connect`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from githubkit import AppInstallationAuthStrategy, GitHub, TokenAuthStrategy, UnauthAuthStrategy
from githubkit.cache import MemCacheStrategy

from bot.config import ConfigError
from bot.github.bound import PrGitHub, RepoGitHub
from bot.github.endpoints.account import AccountEndpoints
from bot.github.endpoints.checks import CheckEndpoints
from bot.github.endpoints.comments import CommentEndpoints
from bot.github.endpoints.pulls import PullEndpoints
from bot.github.endpoints.repository import RepositoryEndpoints
from bot.github.endpoints.reviews import ReviewEndpoints
from bot.github.httpcache import MAX_BYTES, MAX_IDLE_SECONDS, NewestAnswerStorage
from bot.github.installations import InstallationsAuthStrategy
from bot.github.ratebudget import RateBudget
from sharedio.httppool import SharedPool
from storage.keys import PrKey


class GitHubClient(PullEndpoints, ReviewEndpoints, CheckEndpoints, CommentEndpoints, RepositoryEndpoints,
                   AccountEndpoints):
    """What the bot asks of GitHub, each request through the transport's one path."""

    def __init__(self, gh: GitHub, *, max_concurrency: int = 8, bot_login: str | None = None,
                 call_timeout: float = 40.0, rate_budget: RateBudget | None = None):
        super().__init__(gh, max_concurrency=max_concurrency, call_timeout=call_timeout,
                         rate_budget=rate_budget)
        self.bot_login = bot_login
        self._permissions = {}  # the permission endpoint's answers, kept briefly
        self._clone_tokens = {}  # minted for git, kept until near their expiry

    def pr(self, key: PrKey) -> PrGitHub:
        """The calls of one pull request, its repository and number filled in."""
        return PrGitHub(self, key)

    def repository(self, owner: str, repo: str) -> RepoGitHub:
        """The calls of one repository, its owner and name filled in."""
        return RepoGitHub(self, owner, repo)


class _CacheStrategy(MemCacheStrategy):
    """githubkit's in-memory cache, on the storage of `httpcache` (a dict, not SQLite on a thread)."""

    def __init__(self, max_bytes: int = MAX_BYTES, max_idle: float = MAX_IDLE_SECONDS) -> None:
        super().__init__()
        self.max_bytes = max_bytes
        self.max_idle = max_idle

    async def get_async_hishel_storage(self) -> NewestAnswerStorage:  # type: ignore[override]
        if self._hishel_async_storage is None:
            # githubkit types the slot as hishel's AsyncMemoryStorage; ours is another AsyncBaseStorage.
            self._hishel_async_storage = NewestAnswerStorage(max_bytes=self.max_bytes,
                                                              max_idle=self.max_idle)  # type: ignore[assignment]
        return self._hishel_async_storage  # type: ignore[return-value]

    def sizes(self) -> tuple[int, int]:
        """Answers kept and the bytes they count for (both 0 before the first request)."""
        storage = self._hishel_async_storage
        return (len(storage), storage.size_bytes) if isinstance(storage, NewestAnswerStorage) else (0, 0)


def http_cache_sizes(gh: GitHub) -> tuple[int, int]:
    """The HTTP cache of a client `open_github` made: answers kept, and their bytes."""
    strategy = gh.config.cache_strategy
    return strategy.sizes() if isinstance(strategy, _CacheStrategy) else (0, 0)


@asynccontextmanager
async def open_github(
    *,
    api_url: str,
    token: str = "",
    app_id: str | None = None,
    private_key: str | None = None,
    installation_id: int | None = None,
    timeout: float = 10.0,
    read_timeout: float = 30.0,
    cache_bytes: int = MAX_BYTES,
    cache_idle_seconds: float = MAX_IDLE_SECONDS,
) -> AsyncIterator[GitHub]:
    """The process's one githubkit client, open while the context is: `async with
    open_github(...) as gh`. A GitHub App with no `installation_id` serves every installation
    (see installations.py). Its requests go through one aiohttp pool (`sharedio/httppool.py`),
    closed on exit."""
    if app_id and private_key and installation_id:
        auth: Any = AppInstallationAuthStrategy(app_id, private_key, installation_id)
    elif app_id and private_key:
        auth = InstallationsAuthStrategy(app_id, private_key)
    else:
        auth = TokenAuthStrategy(token) if token else UnauthAuthStrategy()
    pool = SharedPool(api_url)
    try:
        async with GitHub(
            auth,
            base_url=api_url,
            timeout=httpx.Timeout(timeout, read=read_timeout),
            http_cache=True,
            cache_strategy=_CacheStrategy(cache_bytes, cache_idle_seconds),
            auto_retry=False,
            # Handed a transport, httpx builds none (and no TLS context) for the clients
            # githubkit makes: the pool's one context serves every App call's client too.
            async_transport=pool,  # githubkit puts its HTTP cache in front of it
        ) as gh:
            yield gh
    finally:
        await pool.close()


@asynccontextmanager
async def connect(config) -> AsyncIterator[GitHubClient]:
    """The wrapper as `config.github` describes it (token or App, timeouts, concurrency): the
    one way serve, doctor and the CLI reach GitHub."""
    g = config.github
    try:
        private_key = Path(g.private_key_path).expanduser().read_text() if g.private_key_path else None
    except OSError as e:  # a start-up mistake: one line, not a traceback
        raise ConfigError(f"config: github.private_key_path: cannot read {g.private_key_path}: "
                          f"{e.strerror or type(e).__name__}") from None
    async with open_github(
        api_url=g.api_url, token=g.token.get_secret_value(), app_id=g.app_id or None,
        private_key=private_key, installation_id=g.installation_id or None,
        timeout=g.timeout_seconds, read_timeout=g.read_timeout_seconds,
        cache_bytes=int(g.http_cache_megabytes * 1024 * 1024), cache_idle_seconds=g.http_cache_idle_minutes * 60,
    ) as gh:
        yield GitHubClient(gh, max_concurrency=g.max_concurrency, bot_login=g.bot_login,
                           call_timeout=g.timeout_seconds + g.read_timeout_seconds)
