"""One GitHub App on several accounts: which installation each request goes to.

Configured without an `installation_id`, the App serves every account it is installed on. Each
repository's installation is looked up once (`GET /repos/{o}/{r}/installation`, as the App) and
kept in process: it changes only when the App is uninstalled and installed again (its tokens
are then refused: 401, or 404 when minting one), which makes the next request look again, at most
once a minute per repository. A plain 404 from the installation is mostly a resource that really
is missing (a repository without a config file, a commenter who is no collaborator), so it makes
the next request look again only once an hour.

A listing's next pages name the repository by id (`/repositories/8514/...?page=2`, as GitHub
links them), not by name: the client keeps the installation its first URL named for them.

The client says which installation a request is for through a context variable (`chosen`), read
by the auth flow of the one githubkit client: requests share its connection pool and HTTP cache,
and each installation's token is githubkit's own (`AppAuth`), minted once and cached until a
minute before it expires.
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncGenerator, Generator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING

import httpx
from githubkit import AppAuthStrategy, AppInstallationAuthStrategy
from githubkit.auth.app import AppAuth
from githubkit.auth.base import BaseAuthStrategy

from bot.github.errors import NotFound

if TYPE_CHECKING:
    from githubkit import GitHubCore

REVERIFY_SECONDS = 60.0  # after a 401 (or a token refused): the installation is likely gone
NOT_FOUND_REVERIFY_SECONDS = 3600.0  # after a plain 404: the resource is likely missing

# The installation the request being sent in this task goes to (None: the App itself, or the
# one configured installation).
chosen: ContextVar[int | None] = ContextVar("convergebot_installation", default=None)

# The first /repos/{owner}/{repo} of a path (GitHub Enterprise serves the API under /api/v3).
_REPO_PATH = re.compile(r"/repos/([^/?#]+)/([^/?#]+)")


class NotInstalled(NotFound):
    """The App has no installation on the repository's account (a 404 from its lookup)."""

    def __init__(self, repo: str) -> None:
        super().__init__(f"the GitHub App is not installed on {repo}", 404)
        self.repo = repo


def repo_of_path(path: str) -> str | None:
    """`owner/repo` for a REST path under /repos/ (an absolute URL's path too), else None (a
    next page's `/repositories/{id}/...` too: its caller knows the repository already)."""
    if "://" in path:
        path = httpx.URL(path).path
    m = _REPO_PATH.search(path.partition("?")[0])
    return f"{m[1]}/{m[2]}" if m else None


@dataclass
class InstallationsAuthStrategy(BaseAuthStrategy):
    """A GitHub App with no installation fixed: each request is sent with the token of the
    installation `chosen` names, or as the App (its JWT) when none is chosen."""

    app_id: str | int
    private_key: str

    def as_app(self) -> AppAuthStrategy:
        return AppAuthStrategy(self.app_id, self.private_key)

    def as_installation(self, installation_id: int) -> AppInstallationAuthStrategy:
        return AppInstallationAuthStrategy(self.app_id, self.private_key, installation_id)

    def get_auth_flow(self, github: GitHubCore) -> httpx.Auth:
        return _ChosenInstallationAuth(github, self)


class _ChosenInstallationAuth(httpx.Auth):
    def __init__(self, github: GitHubCore, strategy: InstallationsAuthStrategy) -> None:
        self._github = github
        self._strategy = strategy
        self._app = AppAuth(github, strategy.app_id, strategy.private_key)
        self._installations: dict[int, AppAuth] = {}

    def _auth(self) -> AppAuth:
        installation_id = chosen.get()
        if installation_id is None:
            return self._app
        auth = self._installations.get(installation_id)
        if auth is None:
            auth = self._installations[installation_id] = AppAuth(
                self._github, self._strategy.app_id, self._strategy.private_key,
                installation_id=installation_id)
        return auth

    def sync_auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        return (yield from self._auth().sync_auth_flow(request))

    async def async_auth_flow(self, request: httpx.Request) -> AsyncGenerator[httpx.Request, httpx.Response]:
        flow = self._auth().async_auth_flow(request)
        outgoing = await flow.__anext__()
        while True:
            response = yield outgoing
            try:
                outgoing = await flow.asend(response)
            except StopAsyncIteration:
                return


class InstallationMap:
    """Repository -> installation id, as looked up or learnt (webhooks, installation listings)."""

    def __init__(self) -> None:
        self._ids: dict[str, tuple[int, float]] = {}  # lower-cased owner/repo -> (id, learnt at)
        # Repositories found without the App, and when: asked again only after REVERIFY_SECONDS
        # (a command on a PR of an account without the App). A PR's fork is never looked up:
        # its branch is read with the base repository's installation (`branch_head(via=)`).
        self._missing: dict[str, float] = {}

    def get(self, repo: str) -> int | None:
        found = self._ids.get(repo.lower())
        return found[0] if found else None

    def missing(self, repo: str) -> bool:
        """Found not installed less than REVERIFY_SECONDS ago."""
        since = self._missing.get(repo.lower())
        return since is not None and time.monotonic() - since < REVERIFY_SECONDS

    def not_installed(self, repo: str) -> None:
        self._missing[repo.lower()] = time.monotonic()

    def learn(self, repo: str, installation_id: int) -> None:
        self._missing.pop(repo.lower(), None)
        known = self._ids.get(repo.lower())
        if known is None or known[0] != installation_id:
            self._ids[repo.lower()] = (installation_id, time.monotonic())

    def doubt(self, repo: str, *, refused: bool) -> bool:
        """A 401 (`refused`) or a 404 came from the repository's installation: forget it, unless
        it was learnt within REVERIFY_SECONDS (`refused`) or NOT_FOUND_REVERIFY_SECONDS, so
        that a resource that is really missing does not cost a lookup per read."""
        known = self._ids.get(repo.lower())
        window = REVERIFY_SECONDS if refused else NOT_FOUND_REVERIFY_SECONDS
        if known is None or time.monotonic() - known[1] < window:
            return False
        del self._ids[repo.lower()]
        return True

    def __len__(self) -> int:
        return len(self._ids)


def learn_from_payload(github: object, payload: dict) -> None:
    """A signed webhook names the installation it came through (`installation.id`) and its
    repository: an App serving several installations then knows that repository's without a
    lookup. Fields of the wrong type are skipped."""
    if not getattr(github, "per_installation", False):
        return
    installation, repository = payload.get("installation"), payload.get("repository")
    if not isinstance(installation, dict) or not isinstance(repository, dict):
        return
    found, name = installation.get("id"), repository.get("full_name")
    if (isinstance(found, int) and not isinstance(found, bool) and found > 0 and isinstance(name, str)
            and name.count("/") == 1 and len(name) <= 300 and name.isprintable()):
        github.installations.learn(name, found)  # type: ignore[attr-defined]
