"""The one GitHub client wrapper: githubkit underneath, raw JSON out, errors the job layer knows.

Reads are conditional (githubkit's HTTP cache revalidates with If-None-Match, and a 304 does not
count against the rate limit). githubkit's own retries are off: a retry that sleeps inside a
worker would hold unrelated PRs hostage, so rate limits surface as RateLimited and the job is
re-scheduled. Concurrency is bounded, and mutations on one PR are serialized.
"""

from __future__ import annotations

import asyncio
import base64
import re
import time
from collections import Counter
from collections.abc import AsyncIterator, Collection, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import structlog
from githubkit import GitHub
from githubkit.cache import MemCacheStrategy
from githubkit.exception import (
    GitHubException,
    GraphQLFailed,
    PrimaryRateLimitExceeded,
    RequestError,
    RequestFailed,
    SecondaryRateLimitExceeded,
)
from graphql import FragmentDefinitionNode, GraphQLError, OperationDefinitionNode, OperationType
from graphql import parse as graphql_parse

from bot import metrics
from bot.github.errors import Conflict, GitHubError, NotFound, RateLimited, Unavailable
from bot.github.httpcache import NewestAnswerStorage
from bot.github.installations import (
    InstallationMap,
    InstallationsAuthStrategy,
    NotInstalled,
    chosen,
    repo_of_path,
)
from bot.github.ratebudget import InstallationBudgets, RateBudget
from bot.github.reach import GitHubReach
from bot.github.stamps import parse_time
from sharedio.httppool import SharedPool
from storage.locks import KeyedLocks

log = structlog.get_logger(__name__)

COPILOT_REVIEWER = "copilot-pull-request-reviewer[bot]"
PERMISSION_TTL_SECONDS = 60.0
WRITE_PERMISSIONS = frozenset({"admin", "maintain", "write"})

THREAD_COMMENTS_READ = 50  # a thread's comments read with it (its first ones)

# A comment's id is read as `fullDatabaseId`, a BigInt GitHub sends as a string: the 32-bit
# `databaseId` is deprecated for it. GitHub may null any node of a `nodes` list.
_THREAD_PAGE = """
fragment ThreadPage on PullRequestReviewThreadConnection {
  pageInfo { hasNextPage endCursor }
  nodes {
    id isResolved isOutdated path line
    comments(first: THREAD_COMMENTS) { nodes { id fullDatabaseId body author { login } createdAt url } }
  }
}
""".replace("THREAD_COMMENTS", str(THREAD_COMMENTS_READ))

_THREADS_QUERY = """
query($owner: String!, $name: String!, $number: Int!, $after: String) {
  repository(owner: $owner, name: $name) {
    pullRequest(number: $number) {
      reviewThreads(first: 100, after: $after) { ...ThreadPage }
    }
  }
}
""" + _THREAD_PAGE

# A fresh review's reads in one request: the PR's review threads and the head commit's check
# runs and statuses. GitHub prices a query by the connections it may return (here 1 + 100 + 1
# page requests, /100, rounded): 1 point, like one REST read, where threads, check runs and the
# combined status were three.
_REVIEW_STATE_QUERY = """
query($owner: String!, $name: String!, $number: Int!, $head: GitObjectID!) {
  repository(owner: $owner, name: $name) {
    pullRequest(number: $number) {
      reviewThreads(first: 100) { ...ThreadPage }
    }
    object(oid: $head) {
      ... on Commit {
        statusCheckRollup {
          contexts(first: 100) {
            pageInfo { hasNextPage }
            nodes {
              __typename
              ... on CheckRun { name status conclusion checkSuite { app { slug } } }
              ... on StatusContext { context state }
            }
          }
        }
      }
    }
  }
}
""" + _THREAD_PAGE

# Which checks on a head branch protection requires for the PR (first 100: a longer list is cut).
_REQUIRED_CHECKS_QUERY = """
query($owner: String!, $name: String!, $number: Int!, $head: GitObjectID!) {
  repository(owner: $owner, name: $name) {
    object(oid: $head) {
      ... on Commit {
        statusCheckRollup {
          contexts(first: 100) {
            nodes {
              __typename
              ... on CheckRun { name isRequired(pullRequestNumber: $number) }
              ... on StatusContext { context isRequired(pullRequestNumber: $number) }
            }
          }
        }
      }
    }
  }
}
"""

# Whether the PR's base takes changes only through a merge queue, and the PR's place in it
# (`mergeQueueEntry` is null when it is not queued; `headCommit` is its merge group).
_QUEUE_ENTRY = "mergeQueueEntry { id state position headCommit { oid } }"
_MERGE_QUEUE_QUERY = """
query($owner: String!, $name: String!, $number: Int!) {
  repository(owner: $owner, name: $name) {
    pullRequest(number: $number) {
      id state headRefOid isMergeQueueEnabled isInMergeQueue ENTRY
    }
  }
}
""".replace("ENTRY", _QUEUE_ENTRY)
_ENQUEUE_MUTATION = """
mutation($id: ID!, $head: GitObjectID!) {
  enqueuePullRequest(input: {pullRequestId: $id, expectedHeadOid: $head}) { ENTRY }
}
""".replace("ENTRY", _QUEUE_ENTRY)


@dataclass(frozen=True)
class ThreadWrite:
    """One thread's part of `GitHubClient.write_threads`: a reply (None: none) and whether to
    resolve the thread after it."""

    thread_id: str
    body: str | None
    resolve: bool


def threads_mutation(writes: Sequence[ThreadWrite]) -> tuple[str, dict[str, str]]:
    """One GraphQL document for every reply and resolve, with its variables. GitHub runs a
    document's mutations one after the other, in order, so each thread's reply lands before its
    resolve."""
    params, fields, variables = [], [], {}
    for i, w in enumerate(writes):
        params.append(f"$t{i}: ID!")
        variables[f"t{i}"] = w.thread_id
        if w.body is not None:
            params.append(f"$b{i}: String!")
            variables[f"b{i}"] = w.body
            fields.append(f"r{i}: addPullRequestReviewThreadReply(input: "
                          f"{{pullRequestReviewThreadId: $t{i}, body: $b{i}}}) {{ comment {{ id }} }}")
        if w.resolve:
            fields.append(f"s{i}: resolveReviewThread(input: {{threadId: $t{i}}}) {{ thread {{ id isResolved }} }}")
    return f"mutation({', '.join(params)}) {{\n  " + "\n  ".join(fields) + "\n}", variables


class _CacheStrategy(MemCacheStrategy):
    """githubkit's in-memory cache, on the storage of `httpcache` (a dict, not SQLite on a thread)."""

    async def get_async_hishel_storage(self) -> NewestAnswerStorage:  # type: ignore[override]
        if self._hishel_async_storage is None:
            self._hishel_async_storage = NewestAnswerStorage()  # type: ignore[assignment]
        return self._hishel_async_storage  # type: ignore[return-value]


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
) -> AsyncIterator[GitHub]:
    """The process's one githubkit client, open while the context is: `async with
    open_github(...) as gh`. A GitHub App with no `installation_id` serves every installation
    (see installations.py). Its requests go through one aiohttp pool (`transport.py`), closed
    on exit."""
    if app_id and private_key and installation_id:
        from githubkit import AppInstallationAuthStrategy

        auth: Any = AppInstallationAuthStrategy(app_id, private_key, installation_id)
    elif app_id and private_key:
        auth = InstallationsAuthStrategy(app_id, private_key)
    else:
        from githubkit import TokenAuthStrategy, UnauthAuthStrategy

        auth = TokenAuthStrategy(token) if token else UnauthAuthStrategy()
    pool = SharedPool(api_url)
    try:
        async with GitHub(
            auth,
            base_url=api_url,
            timeout=httpx.Timeout(timeout, read=read_timeout),
            http_cache=True,
            cache_strategy=_CacheStrategy(),
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
    private_key = Path(g.private_key_path).expanduser().read_text() if g.private_key_path else None
    async with open_github(
        api_url=g.api_url, token=g.token.get_secret_value(), app_id=g.app_id or None,
        private_key=private_key, installation_id=g.installation_id or None,
        timeout=g.timeout_seconds, read_timeout=g.read_timeout_seconds,
    ) as gh:
        yield GitHubClient(gh, max_concurrency=g.max_concurrency, bot_login=g.bot_login,
                           call_timeout=g.timeout_seconds + g.read_timeout_seconds)


def _told_retry_at(exc: RequestFailed) -> datetime | None:
    """When GitHub said to come back (Retry-After, else x-ratelimit-reset), if it said."""
    headers = exc.response.headers
    now = datetime.now(UTC)
    after = headers.get("retry-after", "")
    if after.isdigit():
        return now + timedelta(seconds=max(1, int(after)))
    reset = headers.get("x-ratelimit-reset", "")
    if reset.isdigit():
        return max(now + timedelta(seconds=1), datetime.fromtimestamp(int(reset), UTC))
    return None


def _translate(exc: GitHubException, what: str) -> GitHubError:
    if isinstance(exc, (PrimaryRateLimitExceeded, SecondaryRateLimitExceeded)) or (
        isinstance(exc, RequestFailed) and exc.response.status_code == 429
    ):
        primary = isinstance(exc, PrimaryRateLimitExceeded)
        return RateLimited(f"{what}: rate limited ({exc.response.status_code})", _told_retry_at(exc),
                           not primary, exc.response.status_code)
    if isinstance(exc, RequestFailed):
        status = exc.response.status_code
        if status in (404, 410):
            return NotFound(f"{what}: {status}", status)
        if status in (405, 409, 422):
            return Conflict(f"{what}: {status} {_message(exc)}", status)
        if status >= 500:
            return Unavailable(f"{what}: {status}", status)
        return GitHubError(f"{what}: {status} {_message(exc)}", status)
    if isinstance(exc, RequestError):
        return Unavailable(f"{what}: {type(exc.exc).__name__}")
    if isinstance(exc, GraphQLFailed):
        return GitHubError(f"{what}: GraphQL errors {exc.response.errors}")
    return GitHubError(f"{what}: {exc}")


def _message(exc: RequestFailed) -> str:
    try:
        return str(exc.response.json().get("message", ""))
    except Exception:
        return ""


class ReadLog:
    """The GETs made inside `GitHubClient.tracking_reads()`, and how many were not modified."""

    __slots__ = ("reads", "unchanged")

    def __init__(self) -> None:
        self.reads = 0
        self.unchanged = 0

    @property
    def all_unchanged(self) -> bool:
        """Every read was answered from the HTTP cache after a 304 (and there was at least one):
        GitHub had nothing new since this process last read the same URLs."""
        return self.reads > 0 and self.unchanged == self.reads


_read_log: ContextVar[ReadLog | None] = ContextVar("convergebot_read_log", default=None)


def not_modified(raw: httpx.Response) -> bool:
    """The response is the cached one: GitHub answered 304 to its revalidation (githubkit asks
    hishel to revalidate every read, so a cached answer is never served unrevalidated)."""
    return bool(raw.extensions.get("hishel_from_cache"))


_LONG_AGO = datetime.min.replace(tzinfo=UTC)


def _changed_paths(comparison: dict) -> set[str]:
    """Every path a comparison's files touch (a rename touches its old name too)."""
    files = comparison.get("files") or []
    return {f["filename"] for f in files} | {f["previous_filename"] for f in files
                                             if f.get("previous_filename")}


class DryRunRefused(GitHubError):
    """A write asked of the client while `github.dry_run` is on: a write path the dry run missed."""


# What the dry run lets through besides reads: a GraphQL document of queries only, and the App
# minting its installation token.
_TOKEN_MINT = re.compile(r"POST /app/installations/\d+/access_tokens")


def _queries_only(document: str) -> bool:
    """Whether a GraphQL document holds queries alone, as GraphQL itself reads it (commas,
    comments and strings included); one that does not parse is no query."""
    try:
        parsed = graphql_parse(document)
    except GraphQLError:
        return False
    return all(isinstance(d, OperationDefinitionNode) and d.operation is OperationType.QUERY
               or isinstance(d, FragmentDefinitionNode) for d in parsed.definitions)


def _minting_refused(err: GitHubError) -> int | None:
    """The status GitHub refused an installation token with, when minting it (inside githubkit's
    auth flow, so it comes wrapped as a RequestError) is what failed: 404 for an installation
    that is gone."""
    cause = err.__cause__
    inner = getattr(cause, "exc", None) if isinstance(cause, RequestError) else None
    return inner.response.status_code if isinstance(inner, RequestFailed) else None


def _flight(installation: int | None, resource: str) -> str:
    return resource if installation is None else f"{installation}:{resource}"


SECONDARY_BACKOFF_START = 60.0
SECONDARY_BACKOFF_CAP = 900.0


class GitHubClient:
    def __init__(self, gh: GitHub, *, max_concurrency: int = 8, bot_login: str | None = None,
                 call_timeout: float = 40.0, rate_budget: RateBudget | None = None):
        self.gh = gh
        # The installation's (token's) budget per resource, from every answer's x-ratelimit-*;
        # an App on several installations keeps one per installation (see ratebudget.py).
        self.rate_budget = rate_budget or (InstallationBudgets() if self.per_installation else RateBudget())
        self.installations = InstallationMap()  # repository -> installation, when per_installation
        self.installation_lookups = 0  # GET /repos/{o}/{r}/installation made
        self._lookups = KeyedLocks()
        self.call_timeout = call_timeout
        self.bot_login = bot_login
        self._slots = asyncio.Semaphore(max_concurrency)
        self._pr_mutations = KeyedLocks()
        self._permissions: dict[tuple[str, str, str], tuple[float, str]] = {}
        # Until when the credential's primary budget is spent; an App serving several
        # installations keeps it per installation (each has its own limit).
        self._exhausted_until: datetime | None = None
        self._installation_exhausted: dict[int, datetime] = {}
        self._secondary_strikes = 0
        self._clone_tokens: dict[int | None, tuple[str, datetime]] = {}
        # metered requests sent and not yet answered, per bucket (an installation's: "id:bucket")
        self._in_flight: Counter[str] = Counter()
        self.gets = 0  # every GET this client made, and those answered 304 (from the cache)
        self.gets_not_modified = 0
        self.reach = GitHubReach()  # answered? credentials taken? (for /readyz)

    # -- plumbing -------------------------------------------------------------------------------

    def _rate_limited(self, err: RateLimited) -> RateLimited:
        """Fill in when to come back: what GitHub said, else exponential backoff (secondary)."""
        if not err.secondary:
            # The primary budget is the token's: no call can succeed before the reset, so
            # further calls fail fast here instead of spending requests on certain 403s.
            err.retry_at = err.retry_at or datetime.now(UTC) + timedelta(seconds=60)
            if (installation := chosen.get()) is None:
                self._exhausted_until = err.retry_at
            else:
                self._installation_exhausted[installation] = err.retry_at
        elif err.retry_at is None:
            wait = min(SECONDARY_BACKOFF_CAP, SECONDARY_BACKOFF_START * 2**self._secondary_strikes)
            self._secondary_strikes += 1
            err.retry_at = datetime.now(UTC) + timedelta(seconds=wait)
        return err

    def _observe(self, response: Any) -> None:
        """Record the rate-limit balance an answer reports (no request of its own)."""
        raw = getattr(response, "raw_response", None)
        if isinstance(raw, httpx.Response):
            self._budget().observe_headers(raw.headers, status=raw.status_code)

    def _budget(self) -> RateBudget:
        """The budget of the installation the request in this task goes to."""
        budget, installation = self.rate_budget, chosen.get()
        if isinstance(budget, InstallationBudgets) and installation is not None:
            return budget.of(installation)
        return budget

    def _spent(self, what: str, resource: str) -> RateLimited | None:
        """The refusal GitHub would answer, when the balance its last answer reported is already
        spent by the requests in flight: the call then waits for the reset without being sent (a
        refused request is one more strike against the token, and each is a 403 to log). Near
        zero this may hold back a conditional read GitHub would have answered 304, for free."""
        bucket = self._budget().bucket(resource)
        flying = self._in_flight[_flight(chosen.get(), resource)]
        if bucket is None or bucket.assumed or bucket.remaining - flying > 0:
            return None
        return RateLimited(f"{what}: rate limit spent ({resource} bucket, "
                           f"{bucket.remaining} left, {flying} in flight)",
                           datetime.fromtimestamp(bucket.reset, UTC), False)

    # -- dry run: the last line of defence against a write nobody meant to make -----------------

    # Set by the Runtime from `[github] dry_run`. Every write should have stopped at the outbox
    # or the fixer already; one that did not fails here, loudly, instead of reaching GitHub.
    dry_run = False

    def _refuse_in_dry_run(self, what: str, query: str | None = None) -> None:
        """Raise DryRunRefused for a write: any method but GET/HEAD, except the App's token
        minting (a read's credentials), and a GraphQL document with a mutation in it."""
        if not self.dry_run:
            return
        method = what.partition(" ")[0]
        if query is not None:
            if _queries_only(query):
                return
        elif method in ("GET", "HEAD") or _TOKEN_MINT.fullmatch(what):
            return
        log.warning("dry_run.refused", request=what)
        raise DryRunRefused(f"dry run: refused to send {what} (github.dry_run is on; no GitHub writes)")

    async def _call(self, what: str, send, *, parse=None, metered: bool = True,
                    resource: str = "core") -> Any:
        """`send()`'s answer (or `parse(answer)`); `metered=False` for calls made with another
        identity's budget (the App's own JWT), which the installation's budget must not record.
        `resource`: the rate-limit bucket the call is charged to (GraphQL has its own)."""
        if not what.startswith("graphql "):
            self._refuse_in_dry_run(what)  # GraphQL is looked at in `_graphql`, with its document
        installation = chosen.get()
        until = self._exhausted_until if installation is None else self._installation_exhausted.get(installation)
        if until is not None:
            if datetime.now(UTC) < until:
                raise RateLimited(f"{what}: rate limit exhausted", until, False)
            if installation is None:
                self._exhausted_until = None
            else:
                del self._installation_exhausted[installation]
        async with self._slots:
            if metered and (refusal := self._spent(what, resource)) is not None:
                raise refusal
            self._in_flight[_flight(installation, resource)] += metered
            try:
                # Our own deadline: githubkit's HTTP cache layer (hishel) drops httpx's
                # per-request timeout, and a GitHub that never answers would hold a worker forever.
                async with asyncio.timeout(self.call_timeout):
                    result = await send()
                self.reach.answered(200)
                metrics.github_request(what, result)
                if metered:
                    self._observe(result)
                if parse is not None:
                    result = parse(result)
            except TimeoutError:
                self.reach.unanswered()
                metrics.github_request(what, "timeout")
                raise Unavailable(f"{what}: no answer within {self.call_timeout:.0f}s") from None
            except GitHubException as exc:
                metrics.github_request(what, getattr(exc, "response", None))
                status = getattr(getattr(exc, "response", None), "status_code", None)
                if isinstance(status, int) and status < 500:
                    self.reach.answered(status)
                else:
                    self.reach.unanswered()
                if metered:
                    self._observe(getattr(exc, "response", None))
                err = _translate(exc, what)
                if isinstance(err, RateLimited):
                    err = self._rate_limited(err)
                raise err from exc
            finally:
                self._in_flight[_flight(installation, resource)] -= metered
        self._secondary_strikes = 0
        return result

    @contextmanager
    def tracking_reads(self) -> Iterator[ReadLog]:
        """Count the GETs made inside (in this task) and how many GitHub answered 304."""
        log_ = ReadLog()
        token = _read_log.set(log_)
        try:
            yield log_
        finally:
            _read_log.reset(token)

    # -- installations (an App configured without installation_id) ---------------------------

    @property
    def per_installation(self) -> bool:
        """A GitHub App with no installation configured: each repository's installation is
        looked up, and each request sent with that installation's token."""
        return isinstance(self.gh.auth, InstallationsAuthStrategy)

    async def installation_for(self, owner: str, repo: str) -> int:
        """The id of the App's installation on the repository: looked up once as the App, then
        kept (a 401 or 404 from it makes a later request look again, see installations.py).
        NotInstalled when the App is not installed there."""
        full = f"{owner}/{repo}"
        if (found := self.installations.get(full)) is not None:
            return found
        async with self._lookups.hold(full.lower()):  # concurrent first requests: one lookup
            if (found := self.installations.get(full)) is not None:
                return found
            if self.installations.missing(full):
                raise NotInstalled(full)
            try:
                raw = await self._as_app("GET", f"/repos/{owner}/{repo}/installation")
            except NotFound:
                self.installations.not_installed(full)
                raise NotInstalled(full) from None
            self.installation_lookups += 1
            found = int(raw.json()["id"])
            self.installations.learn(full, found)
            log.info("github.installation", repo=full, installation_id=found)
            return found

    @contextmanager
    def for_installation(self, installation_id: int | None) -> Iterator[None]:
        """Send the requests made inside (in this task) that name no repository (GET
        /installation/repositories, /rate_limit) with this installation's token."""
        token = chosen.set(installation_id)
        try:
            yield
        finally:
            chosen.reset(token)

    async def _choose(self, what: str, repo: str | None) -> int | None:
        """The installation a request for `repo` goes to (None: the one configured credential)."""
        if not self.per_installation:
            return None
        if repo is None:
            if (current := chosen.get()) is None:
                raise GitHubError(f"{what}: names no repository, and the App serves several installations")
            return current
        owner, _, name = repo.partition("/")
        return await self.installation_for(owner, name)

    async def _as_installation_of(self, what: str, repo: str | None, send, *, foreign: bool = False,
                                  **kw: Any) -> Any:
        """`self._call(what, send, ...)` with the token of `repo`'s installation. `foreign`: the
        request is for another repository (a fork's branch), whose 404 says nothing about
        `repo`'s installation; only a refused token does."""
        installation = await self._choose(what, repo)
        if installation is None:
            return await self._call(what, send, **kw)
        token = chosen.set(installation)
        try:
            return await self._call(what, send, **kw)
        except GitHubError as e:
            minting = _minting_refused(e)
            refused = e.status == 401 or minting in (401, 404)
            if (repo is not None and (refused or (isinstance(e, NotFound) and not foreign))
                    and self.installations.doubt(repo, refused=refused)):
                log.info("github.installation_doubted", repo=repo, installation_id=installation,
                         status=minting or e.status)
            raise
        finally:
            chosen.reset(token)

    async def app_installations(self) -> list[dict]:
        """GET /app/installations as the App (every page): the accounts the App is installed on."""
        found: list[dict] = []
        url: str | None = "/app/installations"
        params: dict | None = {"per_page": 100}
        while url:
            raw = await self._as_app("GET", url, params=params)
            found.extend(raw.json())
            url, params = raw.links.get("next", {}).get("url"), None
        return found

    async def _request(self, method: str, url: str, *, repo: str | None = None, **kw: Any) -> httpx.Response:
        """`repo` (owner/repo): the repository whose installation's token is sent, when it is not
        the one `url` names: a `Link: rel="next"` page (GitHub's `/repositories/{id}/...` names
        none), or a fork's branch read through the PR's base repository."""
        reads = _read_log.get() if method == "GET" else None
        if reads is not None:
            reads.reads += 1  # counted before the call: a read that fails is no "unchanged"
        named = repo_of_path(url)
        foreign = repo is not None and named is not None and named.lower() != repo.lower()
        resp = await self._as_installation_of(f"{method} {url}", repo or named,
                                              lambda: self.gh.arequest(method, url, **kw), foreign=foreign)
        raw = resp.raw_response
        if method == "GET":
            cached = not_modified(raw)
            self.gets += 1
            self.gets_not_modified += cached
            if reads is not None:
                reads.unchanged += cached
        return raw

    async def _graphql(self, what: str, query: str, variables: dict, *, repo: str | None = None) -> dict:
        """`repo`: the repository the request is for (its installation's token is sent), when
        the variables do not name it as `owner` and `name`."""
        # The answer itself (not githubkit's parsed data) so its rate-limit headers are seen;
        # `_arequest` + `parse_graphql_response` is what `async_graphql` does (githubkit 0.16).
        gql = self.gh.graphql
        self._refuse_in_dry_run(f"graphql {what}", query)
        if repo is None and "owner" in variables and "name" in variables:
            repo = f"{variables['owner']}/{variables['name']}"
        return await self._as_installation_of(f"graphql {what}", repo, lambda: gql._arequest(query, variables),
                                              parse=gql.parse_graphql_response, resource="graphql")

    async def _json(self, method: str, url: str, **kw: Any) -> Any:
        raw = await self._request(method, url, **kw)
        return raw.json() if raw.content else None

    async def _pages(self, url: str, params: dict | None = None, *, max_pages: int | None = None) -> list[Any]:
        """Every page (the first `max_pages`, when given), following the absolute
        `Link: rel="next"` GitHub sends. Its next links name the repository by id
        (`/repositories/8514/...`), not by name: every page goes to the installation of the
        repository the first URL names."""
        items: list[Any] = []
        next_url: str | None = url
        repo = repo_of_path(url)
        query: dict[str, Any] | None = {"per_page": 100, **(params or {})}
        pages = 0
        while next_url and (max_pages is None or pages < max_pages):
            pages += 1
            raw = await self._request("GET", next_url, repo=repo, params=query)
            page = raw.json()
            items.extend(page if isinstance(page, list) else [page])
            next_url = raw.links.get("next", {}).get("url")
            query = None  # the next link carries the query already
        return items

    @asynccontextmanager
    async def mutating(self, pr_key: str) -> AsyncIterator[None]:
        """Mutations on one PR are serial; different PRs proceed in parallel."""
        async with self._pr_mutations.hold(pr_key):
            yield

    # -- reads ----------------------------------------------------------------------------------

    async def clone_token(self, owner: str | None = None, repo: str | None = None) -> str | None:
        """A token git can clone and push with: the configured one, or for a GitHub App a
        fresh token of the installation (the one on `owner/repo` when the App serves several;
        minted once per installation, reused until ten minutes before it expires)."""
        from githubkit import AppInstallationAuthStrategy, TokenAuthStrategy

        auth = self.gh.auth
        if isinstance(auth, TokenAuthStrategy):
            return auth.token
        if isinstance(auth, AppInstallationAuthStrategy):
            installation = auth.installation_id
        elif isinstance(auth, InstallationsAuthStrategy):
            if not owner or not repo:
                raise GitHubError("clone_token: name the repository: the App serves several installations")
            installation = await self.installation_for(owner, repo)
        else:
            return None
        now = datetime.now(UTC)
        cached = self._clone_tokens.get(installation)
        if cached and cached[1] - timedelta(minutes=10) > now:
            return cached[0]
        url = f"/app/installations/{installation}/access_tokens"
        async with self.gh.with_auth(auth.as_app()) as app:
            data = await self._call(f"POST {url}", lambda: app.arequest("POST", url), metered=False)
        body = data.json()
        expires = datetime.fromisoformat(body.get("expires_at", "").replace("Z", "+00:00") or now.isoformat())
        self._clone_tokens[installation] = (body["token"], expires)
        return body["token"]

    # -- the App's webhook delivery log: as the App (its JWT), not on the installation's budget --

    @property
    def is_app(self) -> bool:
        """Authenticated as a GitHub App (one installation or several); only an App can read its
        delivery log."""
        from githubkit import AppInstallationAuthStrategy

        return isinstance(self.gh.auth, AppInstallationAuthStrategy | InstallationsAuthStrategy)

    async def _as_app(self, method: str, url: str, **kw: Any) -> httpx.Response:
        async with self.gh.with_auth(self.gh.auth.as_app()) as app:
            resp = await self._call(f"{method} {url}", lambda: app.arequest(method, url, **kw),
                                    metered=False)
        return resp.raw_response

    async def hook_deliveries(self, *, per_page: int = 100, cursor: str | None = None,
                              hook: str | None = None) -> tuple[list[dict], str | None]:
        """One page of a webhook's delivery log (one entry per attempt, newest first) and the
        cursor of the next page (None on the last). `hook`: an organisation's or a repository's
        webhook (`orgs/acme/hooks/12`, `repos/acme/widgets/hooks/34`), read with the token and
        charged to its rate limit; None: the App's own, read as the App."""
        params: dict[str, Any] = {"per_page": per_page} | ({"cursor": cursor} if cursor else {})
        if hook is None:
            raw = await self._as_app("GET", "/app/hook/deliveries", params=params)
        else:
            raw = await self._request("GET", f"/{hook}/deliveries", params=params)
        next_url = raw.links.get("next", {}).get("url")
        return raw.json(), httpx.URL(next_url).params.get("cursor") if next_url else None

    async def redeliver(self, delivery_id: int, *, hook: str | None = None) -> None:
        """Ask GitHub to send a logged delivery again, with its guid; it answers 202 at once and
        sends it later, as a new log entry with `redelivery: true`. `hook` as for
        `hook_deliveries`."""
        if hook is None:
            await self._as_app("POST", f"/app/hook/deliveries/{delivery_id}/attempts")
        else:
            await self._request("POST", f"/{hook}/deliveries/{delivery_id}/attempts")

    async def rate_limit(self) -> dict:
        """GET /rate_limit (free: it does not count against the limit it reports)."""
        return await self._json("GET", "/rate_limit")

    async def repo(self, owner: str, repo: str) -> dict:
        return await self._json("GET", f"/repos/{owner}/{repo}")

    async def pull(self, owner: str, repo: str, number: int) -> dict:
        return await self._json("GET", f"/repos/{owner}/{repo}/pulls/{number}")

    async def file_text(self, owner: str, repo: str, path: str) -> tuple[str, str] | None:
        """`(text, blob sha)` of a file on the repository's default branch, None when there is
        none (404). Conditional like every read: an unchanged file is a 304, free of rate limit."""
        try:
            data = await self._json("GET", f"/repos/{owner}/{repo}/contents/{quote(path)}")
        except NotFound:
            return None
        if not isinstance(data, dict) or data.get("type") != "file":
            return None  # a directory of that name: no file
        raw = base64.b64decode(data.get("content") or "")
        return raw.decode("utf-8", errors="replace"), str(data.get("sha") or "")

    async def branch_head(self, owner: str, repo: str, branch: str, *, via: str | None = None) -> str:
        """The head from the branch ref: the PR object's head.sha lags after a push.

        `via` (owner/repo): the repository whose installation reads it, when that is not
        `owner/repo`: a PR's base repository, for the branch of a fork in an account without the
        App (any installation's token reads a public repository; looking the fork's owner up would
        find no installation, and cost an App request each time)."""
        ref = await self._json("GET", f"/repos/{owner}/{repo}/git/ref/heads/{branch}", repo=via)
        return ref["object"]["sha"]

    async def conflicting_files(self, owner: str, repo: str, base_ref: str, head_sha: str) -> list[str]:
        """The files changed on both sides since the head and the base parted, sorted: the
        head's side from `compare/{base}...{head}`, the base's from `compare/{merge base}...{base}`
        (two conditional GETs: an unchanged pair costs no rate limit).

        An approximation of the files GitHub finds in conflict, not its answer (the API has
        none): a file both sides changed may still merge cleanly, and GitHub lists at most 300
        files of a comparison. It tells a fixer where to look."""
        base = quote(base_ref, safe="/")
        url = f"/repos/{owner}/{repo}/compare"
        ours = await self._json("GET", f"{url}/{base}...{head_sha}")
        merge_base = ours["merge_base_commit"]["sha"]
        theirs = await self._json("GET", f"{url}/{merge_base}...{base}")
        return sorted(_changed_paths(ours) & _changed_paths(theirs))

    async def pulls_by_update(self, owner: str, repo: str, since: datetime | None, *,
                              per_page: int = 30, max_pages: int = 10) -> tuple[list[dict], bool, bool]:
        """The repository's PRs (open and closed), most recently updated first, down to the
        first one updated before `since`: `(pulls, unchanged, complete)`.

        Any change to a PR (a push, a review, a state change) moves it to the top of this list,
        so a 304 for the first page (`unchanged`, free of rate limit) says no PR of the
        repository changed since this process last read it. `complete` is False when
        `max_pages` pages did not reach `since` (or there was no `since` to reach).
        """
        pulls: list[dict] = []
        url = f"/repos/{owner}/{repo}/pulls"
        # Any page size tells "nothing changed" (the newest item would differ); a small first
        # page is cheaper to send and parse, and more are read only when many PRs changed.
        query: dict | None = {"state": "all", "sort": "updated", "direction": "desc", "per_page": per_page}
        unchanged = False
        for page_no in range(max_pages):
            with self.tracking_reads() as reads:
                # The next pages' links name the repository by id: its name is kept for them.
                raw = await self._request("GET", url, repo=f"{owner}/{repo}", params=query)
            if page_no == 0:
                unchanged = reads.all_unchanged
            page = raw.json()
            pulls.extend(page)
            if since is not None and (not page or (parse_time(page[-1].get("updated_at")) or _LONG_AGO) < since):
                return pulls, unchanged, True
            next_url = raw.links.get("next", {}).get("url")
            if next_url is None:
                return pulls, unchanged, True  # every PR of the repository is listed
            url, query = next_url, None
        return pulls, unchanged, False

    async def reviews(self, owner: str, repo: str, number: int) -> list[dict]:
        return await self._pages(f"/repos/{owner}/{repo}/pulls/{number}/reviews")

    async def review_threads(self, owner: str, repo: str, number: int, *, after: str | None = None) -> list[dict]:
        """The PR's review threads (those after the cursor `after`, when given)."""
        threads: list[dict] = []
        while True:
            data = await self._graphql(
                "reviewThreads", _THREADS_QUERY, {"owner": owner, "name": repo, "number": number, "after": after}
            )
            pr = (data.get("repository") or {}).get("pullRequest")
            if pr is None:
                raise NotFound(f"graphql reviewThreads: {owner}/{repo}#{number} not found")
            page = pr["reviewThreads"]
            threads.extend(t for t in page.get("nodes") or [] if t)
            if not page["pageInfo"]["hasNextPage"]:
                return threads
            after = page["pageInfo"]["endCursor"]

    async def review_state(self, owner: str, repo: str, number: int, head: str) -> tuple[list[dict], list[dict], dict]:
        """The PR's review threads, and the check runs and commit statuses on `head`, in the
        shapes of `review_threads`, `check_runs` and `combined_status`: one GraphQL request when
        each fits a page, else the rest is read the usual way."""
        data = await self._graphql("reviewState", _REVIEW_STATE_QUERY,
                                   {"owner": owner, "name": repo, "number": number, "head": head})
        found = data.get("repository") or {}
        pr = found.get("pullRequest")
        if pr is None:
            raise NotFound(f"graphql reviewState: {owner}/{repo}#{number} not found")
        page = pr["reviewThreads"]
        threads = [t for t in page.get("nodes") or [] if t]  # GitHub may send null nodes
        if page["pageInfo"]["hasNextPage"]:
            threads += await self.review_threads(owner, repo, number, after=page["pageInfo"]["endCursor"])
        commit = found.get("object")
        contexts = ((commit or {}).get("statusCheckRollup") or {}).get("contexts") or {}
        if commit is None or (contexts.get("pageInfo") or {}).get("hasNextPage"):
            # A head GitHub's GraphQL does not resolve must not read as "no checks, all green":
            # REST answers for it or fails; so does a list longer than one page.
            return threads, await self.check_runs(owner, repo, head), await self.combined_status(owner, repo, head)
        runs, statuses = [], []
        for node in contexts.get("nodes") or []:
            if not node:
                continue
            if node.get("__typename") == "CheckRun":
                runs.append({"name": node["name"], "status": node["status"].lower(),
                             "conclusion": (node.get("conclusion") or "").lower() or None,
                             "app": ((node.get("checkSuite") or {}).get("app") or {})})
            elif node.get("__typename") == "StatusContext":
                state = node["state"].lower()
                statuses.append({"context": node["context"], "state": "pending" if state == "expected" else state})
        return threads, runs, {"statuses": statuses}

    async def check_runs(self, owner: str, repo: str, ref: str, name: str | None = None) -> list[dict]:
        params = {"check_name": name} if name else None
        pages = await self._pages(f"/repos/{owner}/{repo}/commits/{ref}/check-runs", params)
        return [run for page in pages for run in page.get("check_runs", [])]

    async def check_run_annotations(self, owner: str, repo: str, check_run_id: int, *, limit: int = 50) -> list[dict]:
        """The first `limit` annotations of a check run (one page)."""
        return await self._json("GET", f"/repos/{owner}/{repo}/check-runs/{check_run_id}/annotations",
                                params={"per_page": min(limit, 100)})

    async def combined_status(self, owner: str, repo: str, ref: str) -> dict:
        return await self._json("GET", f"/repos/{owner}/{repo}/commits/{ref}/status")

    async def issue_comments(self, owner: str, repo: str, number: int, since: datetime | None = None) -> list[dict]:
        """The PR's issue comments (updated at or after `since`, when given)."""
        params = {"since": since.strftime("%Y-%m-%dT%H:%M:%SZ")} if since else None
        return await self._pages(f"/repos/{owner}/{repo}/issues/{number}/comments", params)

    async def repo_comments(self, owner: str, repo: str, since: datetime, *, review: bool = False,
                            max_pages: int = 10) -> list[dict]:
        """Comments on any PR or issue of the repository (`review`: the PRs' review comments
        instead) updated at or after `since`, the oldest update first: a reader that stops
        after `max_pages` pages goes on from the newest one it saw."""
        path = "pulls/comments" if review else "issues/comments"
        params = {"since": since.strftime("%Y-%m-%dT%H:%M:%SZ"), "sort": "updated", "direction": "asc"}
        return await self._pages(f"/repos/{owner}/{repo}/{path}", params, max_pages=max_pages)

    async def open_pulls(self, owner: str, repo: str) -> list[dict]:
        return await self._pages(f"/repos/{owner}/{repo}/pulls", {"state": "open"})

    async def installation_repositories(self) -> list[str]:
        """Full names of the repositories the App installation reaches (every page); for an App
        serving several installations, those of every installation (GET /app/installations as
        the App), whose installation is then known without a lookup."""
        if not self.per_installation:
            pages = await self._pages("/installation/repositories")
            return [r["full_name"] for page in pages for r in page.get("repositories") or []]
        names: list[str] = []
        for installation in await self.app_installations():
            with self.for_installation(int(installation["id"])):
                pages = await self._pages("/installation/repositories")
            for name in (r["full_name"] for page in pages for r in page.get("repositories") or []):
                self.installations.learn(name, int(installation["id"]))
                names.append(name)
        return names

    async def permission(self, owner: str, repo: str, user: str, *, fresh: bool = False) -> str:
        """The user's permission on the repo (`admin`/`maintain`/`write`/...), cached briefly.

        `fresh` skips the cache: a command that changes state must not run on a permission
        revoked within the last minute. The read is conditional, so while the permission is
        unchanged GitHub answers 304 and it costs no rate limit.
        """
        key = (owner, repo, user.lower())
        hit = self._permissions.get(key)
        if hit and not fresh and time.monotonic() - hit[0] < PERMISSION_TTL_SECONDS:
            return hit[1]
        try:
            data = await self._json("GET", f"/repos/{owner}/{repo}/collaborators/{user}/permission")
            level = data.get("role_name") or data.get("permission") or "none"
        except NotFound:
            level = "none"
        self._permissions[key] = (time.monotonic(), level)
        return level

    async def can_write(self, owner: str, repo: str, user: str, *, fresh: bool = False) -> bool:
        return await self.permission(owner, repo, user, fresh=fresh) in WRITE_PERMISSIONS

    # -- writes ---------------------------------------------------------------------------------

    async def comment_once(self, owner: str, repo: str, number: int, marker: str, body: str) -> dict:
        """Post an issue comment carrying a hidden marker, unless one with the marker exists.

        A retried job would otherwise post the same escalation or reply twice.
        """
        tag = f"<!-- {marker} -->"
        async with self.mutating(f"{owner}/{repo}#{number}"):
            for existing in await self.issue_comments(owner, repo, number):
                if tag in (existing.get("body") or ""):
                    return existing
            return await self._json(
                "POST", f"/repos/{owner}/{repo}/issues/{number}/comments", json={"body": f"{body}\n\n{tag}"}
            )

    async def react(self, owner: str, repo: str, comment_id: int, content: str, *, review_comment: bool = False) -> None:
        kind = "pulls" if review_comment else "issues"
        await self._json(
            "POST", f"/repos/{owner}/{repo}/{kind}/comments/{comment_id}/reactions", json={"content": content}
        )

    async def requested_reviewers(self, owner: str, repo: str, number: int) -> list[str]:
        data = await self._json("GET", f"/repos/{owner}/{repo}/pulls/{number}/requested_reviewers")
        return [u["login"] for u in data.get("users", [])]

    async def request_review(self, owner: str, repo: str, number: int, reviewers: list[str], *,
                             look: bool = True, pending: Collection[str] | None = None) -> list[str]:
        """Ask for reviews from those not already asked; Copilot through its endpoint where it
        exists, else as a reviewer. Returns whom it asked.

        Looking first makes a repeat harmless: a request whose answer was lost (GitHub did it,
        then answered 502) is seen as pending and not made again. `look=False` (a first try:
        nothing of ours can be pending) asks at once; GitHub answers a Copilot review already
        pending with a 409, and a person already requested stays requested. `pending`: who the
        caller read as requested (it read them before the reviews, see `bot/effects/runner.py`); then
        no look is made here.
        """
        async with self.mutating(f"{owner}/{repo}#{number}"):
            if pending is None and look:
                pending = await self.requested_reviewers(owner, repo, number)
            pending = {login.lower() for login in pending or ()}
            wanted = [r for r in reviewers if r.lower() not in pending]
            people = [r for r in wanted if r != COPILOT_REVIEWER]
            if COPILOT_REVIEWER in wanted:
                try:
                    await self._json("POST", f"/repos/{owner}/{repo}/pulls/{number}/copilot-code-review")
                except Conflict:
                    pass  # 409: a Copilot review is already pending
                except NotFound:
                    people.append(COPILOT_REVIEWER)  # GHES has no such endpoint
            if people:
                await self._json(
                    "POST", f"/repos/{owner}/{repo}/pulls/{number}/requested_reviewers", json={"reviewers": people}
                )
            return wanted

    async def write_threads(self, writes: Sequence[ThreadWrite], *, repo: str | None = None) -> None:
        """Every reply and resolve of `writes` in one GraphQL request (nothing when empty).
        `repo` (owner/repo): the threads' repository, whose installation the request goes to."""
        writes = [w for w in writes if w.body is not None or w.resolve]
        if writes:
            query, variables = threads_mutation(writes)
            await self._graphql("writeThreads", query, variables, repo=repo)

    async def create_check_run(self, owner: str, repo: str, **fields: Any) -> dict:
        return await self._json("POST", f"/repos/{owner}/{repo}/check-runs", json=fields)

    async def update_check_run(self, owner: str, repo: str, check_run_id: int, **fields: Any) -> dict:
        return await self._json("PATCH", f"/repos/{owner}/{repo}/check-runs/{check_run_id}", json=fields)

    async def required_checks(self, owner: str, repo: str, number: int, head: str) -> set[str]:
        """The names of the checks on `head` that branch protection requires before the PR can
        be merged (`isRequired` of each check run and status): one GraphQL query."""
        data = await self._graphql("requiredChecks", _REQUIRED_CHECKS_QUERY,
                                   {"owner": owner, "name": repo, "number": number, "head": head})
        commit = (data.get("repository") or {}).get("object") or {}
        nodes = (((commit.get("statusCheckRollup") or {}).get("contexts") or {}).get("nodes")) or []
        return {name for n in nodes
                if isinstance(n, dict) and n.get("isRequired") is True and (name := n.get("name") or n.get("context"))}

    async def merge_queue(self, owner: str, repo: str, number: int) -> dict:
        """The PR's `id`, `state`, `headRefOid`, whether its base requires a merge queue
        (`isMergeQueueEnabled`), and its place in it (`isInMergeQueue`, `mergeQueueEntry`): one
        GraphQL query."""
        data = await self._graphql("mergeQueue", _MERGE_QUEUE_QUERY, {"owner": owner, "name": repo, "number": number})
        pr = (data.get("repository") or {}).get("pullRequest")
        if pr is None:
            raise NotFound(f"graphql mergeQueue: {owner}/{repo}#{number} not found")
        return pr

    async def enqueue(self, owner: str, repo: str, number: int, node_id: str, expected_head: str) -> dict | None:
        """Put the PR (`node_id`) in its base's merge queue if its head is still `expected_head`;
        its entry (None once it already left the queue). GitHub's refusal (the head moved, the PR
        cannot be queued) is a Conflict. A repeat is not harmless by itself: read `merge_queue`
        first."""
        async with self.mutating(f"{owner}/{repo}#{number}"):
            try:
                data = await self._graphql("enqueuePullRequest", _ENQUEUE_MUTATION,
                                           {"id": node_id, "head": expected_head}, repo=f"{owner}/{repo}")
            except GitHubError as e:
                if isinstance(e.__cause__, GraphQLFailed):
                    raise Conflict(str(e)) from e
                raise
        return (data.get("enqueuePullRequest") or {}).get("mergeQueueEntry")

    async def merge(self, owner: str, repo: str, number: int, sha: str, method: str = "squash") -> dict:
        """Merge only if the head is still `sha` (GitHub answers 409 otherwise)."""
        async with self.mutating(f"{owner}/{repo}#{number}"):
            # `sha` is the precondition: a push after convergence (between our decision and this
            # PUT) makes GitHub refuse, instead of merging code no round reviewed.
            return await self._json(
                "PUT", f"/repos/{owner}/{repo}/pulls/{number}/merge", json={"sha": sha, "merge_method": method}
            )

    async def update_branch(self, owner: str, repo: str, number: int, expected_head: str) -> None:
        async with self.mutating(f"{owner}/{repo}#{number}"):
            await self._json(
                "PUT", f"/repos/{owner}/{repo}/pulls/{number}/update-branch", json={"expected_head_sha": expected_head}
            )

    async def comment(self, owner: str, repo: str, comment_id: int, *, review_comment: bool = False) -> dict:
        kind = "pulls" if review_comment else "issues"
        return await self._json("GET", f"/repos/{owner}/{repo}/{kind}/comments/{comment_id}")
