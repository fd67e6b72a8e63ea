"""POST /graphql: review threads of a PR and their resolution, through graphql-core.

Objects are small node classes whose attributes and methods are the GraphQL fields (graphql-core
calls a callable attribute with the field arguments). Like GitHub, a bot's GraphQL `login` has no
`[bot]` suffix (`copilot-pull-request-reviewer`), while REST says `copilot-pull-request-reviewer[bot]`.
"""

from __future__ import annotations

import base64
import inspect
from datetime import UTC, datetime
from typing import Any, Protocol, cast

from graphql import (
    DocumentNode,
    GraphQLError,
    GraphQLInterfaceType,
    GraphQLUnionType,
    build_schema,
    execute,
    parse,
    validate,
)
from starlette.routing import Route

from .errors import NotFound
from .gateway import ApiRequest, Gateway, Reply, token_of
from .gitstore import GitStore
from .gql_schema import SDL
from .ids import iso
from .installations import Installations
from .ops.queue import QueueError
from .ratelimit import RateLimiter
from .shapes import RenderContext
from .shapes.pulls import Heads
from .state import (
    CheckRun,
    CommitStatus,
    MergeQueue,
    PullRequest,
    QueueEntry,
    Repo,
    Review,
    ReviewComment,
    ReviewThread,
    State,
)

MAX_PAGE = 100


class NodeReads(Protocol):
    """What the query side's nodes read of the model (the Simulator is one)."""

    state: State
    git: GitStore  # Repository.object(oid:) resolves a ref
    ctx: RenderContext

    async def heads(self, repo: Repo, pr: PullRequest,
                    branches: dict[str, str] | None = None) -> Heads: ...

    async def head_sha(self, repo: Repo, pr: PullRequest) -> str: ...

    async def mergeability(self, repo: Repo, pr: PullRequest,
                           heads: Heads) -> tuple[bool | None, str]: ...

    async def threads_of(self, repo: Repo,
                         pr: PullRequest) -> list[tuple[ReviewThread, bool]]: ...

    def latest_runs(self, repo: Repo, sha: str) -> list[CheckRun]: ...

    def latest_statuses(self, repo: Repo, sha: str) -> list[CommitStatus]: ...

    def merge_queue(self, repo: Repo, branch: str) -> MergeQueue | None: ...

    def queue_entry(self, repo: Repo,
                    pr: PullRequest) -> tuple[MergeQueue, int, QueueEntry] | None: ...

    def entry_state(self, repo: Repo, queue: MergeQueue, entry: QueueEntry) -> str: ...


class GraphqlModel(NodeReads, Protocol):
    """What POST /graphql uses of the model: the nodes' reads, the installations that admit a
    token, the GraphQL rate-limit bucket and the mutations (the Simulator is one)."""

    installations: Installations
    rate_limits: RateLimiter

    def pr(self, full_name: str, number: int) -> tuple[Repo, PullRequest]: ...

    async def is_outdated(self, repo: Repo, thread: ReviewThread, head: str) -> bool: ...

    async def resolve_thread(self, node_id: str, *, user: str,
                             resolved: bool = True) -> ReviewThread: ...

    async def reply(self, repo_name: str, number: int, comment_id: int, *, body: str,
                    user: str) -> ReviewComment: ...

    def queued_pr(self, node: str) -> tuple[Repo, PullRequest]: ...

    async def enqueue_pr(self, repo_name: str, number: int, *, actor: str,
                         expected_head: str | None = None) -> tuple[QueueEntry, bool]: ...

    def record(self, kind: str, actor: str, **fields: Any) -> None: ...


class NotFoundError(GraphQLError):
    """Rendered with GitHub's `"type": "NOT_FOUND"` next to the message."""


class UnprocessableError(GraphQLError):
    """Rendered with GitHub's `"type": "UNPROCESSABLE"`: the mutation was refused as things stand."""


def _cursor(index: int) -> str:
    return base64.b64encode(f"cursor:{index}".encode()).decode()


def _index(cursor: str | None) -> int:
    if cursor is None:
        return 0
    try:
        return int(base64.b64decode(cursor).decode().removeprefix("cursor:"))
    except ValueError:
        raise GraphQLError(f"`{cursor}` does not appear to be a valid cursor.") from None


def connection(items: list, first: int | None, after: str | None, last: int | None = None,
               before: str | None = None) -> dict:
    """Relay cursor pagination with GitHub's rule that `first` or `last` is required (<= 100)."""
    if first is None and last is None:
        raise GraphQLError("You must provide a `first` or `last` value to properly paginate.")
    for name, value in (("first", first), ("last", last)):
        if value is not None and not 0 <= value <= MAX_PAGE:
            raise GraphQLError(f"Requesting {value} records on the connection exceeds the "
                               f"`{name}` limit of {MAX_PAGE} records.")
    start, end = _index(after), len(items)
    if before is not None:
        end = min(end, _index(before) - 1)
    if first is not None:
        end = min(end, start + first)
    if last is not None:
        start = max(start, end - last)
    window = list(enumerate(items[start:end], start + 1))
    return {
        "totalCount": len(items),
        "pageInfo": {"hasNextPage": end < len(items), "hasPreviousPage": start > 0,
                     "startCursor": _cursor(window[0][0]) if window else None,
                     "endCursor": _cursor(window[-1][0]) if window else None},
        "nodes": [node for _, node in window],
        "edges": [{"cursor": _cursor(i), "node": node} for i, node in window],
    }


class ActorNode:
    def __init__(self, sim: NodeReads, login: str) -> None:
        u = sim.state.user(login)
        self.typename = u.type
        self.id = u.node_id
        self.databaseId = u.id
        self.login = login.removesuffix("[bot]")
        self.avatarUrl = sim.ctx.html(f"avatars/{login}")
        self.url = sim.ctx.html(self.login)


class ReviewNode:
    def __init__(self, sim: NodeReads, review: Review) -> None:
        self.id, self.databaseId = review.node_id, review.id
        self.state, self.body = review.state, review.body
        self.author = ActorNode(sim, review.user)
        self.submittedAt = iso(review.submitted_at)
        self.commit = {"oid": review.commit_id}


class CommentNode:
    def __init__(self, sim: NodeReads, repo: Repo, c: ReviewComment, outdated: bool,
                 head: str) -> None:
        self._sim, self._c = sim, c
        self.id, self.databaseId = c.node_id, c.id
        self.fullDatabaseId = str(c.id)  # a BigInt: GitHub sends it as a string
        self.body = self.bodyText = c.body
        self.author = ActorNode(sim, c.user)
        self.createdAt, self.updatedAt = iso(c.created_at), iso(c.updated_at)
        self.url = sim.ctx.html(f"{repo.full_name}/pull/{c.number}#discussion_r{c.id}")
        self.path, self.originalLine = c.path, c.line
        self.line = None if outdated else c.line
        self.outdated = outdated
        self.commit = {"oid": c.commit_id if outdated else head}
        self.originalCommit = {"oid": c.commit_id}
        self._repo, self._head = repo, head

    def replyTo(self, info) -> CommentNode | None:
        if self._c.in_reply_to_id is None:
            return None
        parent = self._sim.state.review_comments[self._c.in_reply_to_id]
        return CommentNode(self._sim, self._repo, parent, self.outdated, self._head)

    def pullRequestReview(self, info) -> ReviewNode | None:
        review_id = self._c.review_id
        review = self._sim.state.reviews.get(review_id) if review_id is not None else None
        return ReviewNode(self._sim, review) if review else None


class ThreadNode:
    def __init__(self, sim: NodeReads, repo: Repo, thread: ReviewThread, outdated: bool,
                 head: str) -> None:
        self._sim, self._repo, self._thread, self._head = sim, repo, thread, head
        self.id = thread.node_id
        self.isResolved, self.isOutdated = thread.is_resolved, outdated
        self.isCollapsed = thread.is_resolved
        self.path, self.originalLine = thread.path, thread.line
        self.line = None if outdated else thread.line
        self.startLine, self.diffSide = None, "RIGHT"
        self.resolvedBy = ActorNode(sim, thread.resolved_by) if thread.resolved_by else None
        self.viewerCanResolve = not thread.is_resolved
        self.viewerCanUnresolve = thread.is_resolved

    def comments(self, info, first=None, after=None, last=None, before=None) -> dict:
        nodes = [CommentNode(self._sim, self._repo, self._sim.state.review_comments[c],
                             self.isOutdated, self._head) for c in self._thread.comment_ids]
        return connection(nodes, first, after, last, before)


class PullRequestNode:
    def __init__(self, sim: NodeReads, repo: Repo, pr: PullRequest) -> None:
        self._sim, self._repo, self._pr = sim, repo, pr
        self.id, self.databaseId, self.number = pr.node_id, pr.id, pr.number
        self.title, self.body = pr.title, pr.body or ""
        self.url = sim.ctx.html(f"{repo.full_name}/pull/{pr.number}")
        self.state = "MERGED" if pr.merged else pr.state.upper()
        self.isDraft, self.merged = pr.draft, pr.merged
        self.headRefName, self.baseRefName = pr.head_ref, pr.base_ref
        self.author = ActorNode(sim, pr.user)

    async def mergeable(self, info) -> str:
        heads = await self._sim.heads(self._repo, self._pr)
        mergeable, _ = await self._sim.mergeability(self._repo, self._pr, heads)
        return {True: "MERGEABLE", False: "CONFLICTING", None: "UNKNOWN"}[mergeable]

    async def headRefOid(self, info) -> str:
        return (await self._sim.heads(self._repo, self._pr)).head

    async def baseRefOid(self, info) -> str:
        return (await self._sim.heads(self._repo, self._pr)).base

    def baseRef(self, info) -> dict:
        """The base branch and the rule protecting it: branch protection's required checks
        (`set_required_checks`), named whether or not they ever reported on a commit, and its
        required approving reviews (`set_required_reviews`; code owners are not modelled)."""
        names, approvals = self._repo.required_checks, self._repo.required_approving_reviews
        rule = {"pattern": self._pr.base_ref, "requiredStatusCheckContexts": list(names),
                "requiredApprovingReviewCount": approvals or None,
                "requiresCodeOwnerReviews": False} if names or approvals else None
        return {"name": self._pr.base_ref, "refUpdateRule": rule}

    def reviewDecision(self, info) -> str | None:
        return self._sim.state.review_decision(self._repo, self._pr)

    async def reviewThreads(self, info, first=None, after=None, last=None, before=None) -> dict:
        head = await self._sim.head_sha(self._repo, self._pr)
        threads = await self._sim.threads_of(self._repo, self._pr)
        nodes = [ThreadNode(self._sim, self._repo, t, outdated, head) for t, outdated in threads]
        return connection(nodes, first, after, last, before)

    def reviews(self, info, first=None, after=None, last=None, before=None) -> dict:
        nodes = [ReviewNode(self._sim, self._sim.state.reviews[r]) for r in self._pr.review_ids]
        return connection(nodes, first, after, last, before)

    def isMergeQueueEnabled(self, info) -> bool:
        return self._sim.merge_queue(self._repo, self._pr.base_ref) is not None

    def isInMergeQueue(self, info) -> bool:
        return self._sim.queue_entry(self._repo, self._pr) is not None

    def mergeQueueEntry(self, info) -> QueueEntryNode | None:
        found = self._sim.queue_entry(self._repo, self._pr)
        return QueueEntryNode(self._sim, self._repo, *found) if found else None


class QueueEntryNode:
    """A PR's place in its base branch's merge queue; `headCommit` is its merge group."""

    def __init__(self, sim: NodeReads, repo: Repo, queue: MergeQueue, position: int,
                 entry: QueueEntry) -> None:
        self._sim, self._repo, self._number = sim, repo, entry.number
        self.id, self.position = entry.node_id, position
        self.state = sim.entry_state(repo, queue, entry)
        self.enqueuedAt = iso(entry.enqueued_at)
        self.enqueuer = ActorNode(sim, entry.enqueuer)
        self.headCommit = CommitNode(sim, repo, entry.group_sha)
        self.baseCommit = CommitNode(sim, repo, entry.base_sha)

    def pullRequest(self, info) -> PullRequestNode:
        return PullRequestNode(self._sim, self._repo, self._sim.state.pr(self._repo, self._number))


class CheckRunNode:
    typename = "CheckRun"

    def __init__(self, run: CheckRun, required: frozenset[str] = frozenset()) -> None:
        self.id, self.databaseId, self.name = run.node_id, run.id, run.name
        self.status = run.status.upper()
        self.conclusion = run.conclusion.upper() if run.conclusion else None
        self.detailsUrl = run.details_url
        self.checkSuite = {"app": {"id": f"A_{run.app}", "slug": run.app, "name": run.app}}
        self._required = run.name in required

    def isRequired(self, info, pullRequestNumber: int | None = None, pullRequestId: str | None = None) -> bool:
        """Branch protection's required checks (`set_required_checks`) name it."""
        return self._required


class StatusContextNode:
    typename = "StatusContext"

    def __init__(self, status: CommitStatus, required: frozenset[str] = frozenset()) -> None:
        self.id = status.node_id
        self.context, self.state = status.context, status.state.upper()
        self.description, self.targetUrl = status.description, status.target_url
        self._required = status.context in required

    def isRequired(self, info, pullRequestNumber: int | None = None, pullRequestId: str | None = None) -> bool:
        return self._required


class CommitNode:
    """A commit reached by `Repository.object(oid:)`: its checks and statuses, rolled up."""

    typename = "Commit"

    def __init__(self, sim: NodeReads, repo: Repo, sha: str) -> None:
        self._sim, self._repo, self.oid = sim, repo, sha

    def statusCheckRollup(self, info) -> dict | None:
        runs = self._sim.latest_runs(self._repo, self.oid)
        statuses = self._sim.latest_statuses(self._repo, self.oid)
        required = frozenset(self._repo.required_checks)
        nodes = [*(CheckRunNode(r, required) for r in runs), *(StatusContextNode(s, required) for s in statuses)]
        if not nodes:
            return None  # GitHub: a commit without checks or statuses has no rollup
        failing = any(r.conclusion in ("failure", "timed_out", "cancelled", "action_required", "startup_failure")
                      for r in runs) or any(s.state in ("failure", "error") for s in statuses)
        pending = any(r.status != "completed" for r in runs) or any(s.state == "pending" for s in statuses)
        state = "FAILURE" if failing else "PENDING" if pending else "SUCCESS"
        return {"state": state,
                "contexts": lambda info, first=None, after=None, last=None, before=None:
                    connection(nodes, first, after, last, before)}


class RepositoryNode:
    def __init__(self, sim: NodeReads, repo: Repo) -> None:
        self._sim, self._repo = sim, repo
        self.id, self.databaseId = repo.node_id, repo.id
        self.name, self.nameWithOwner = repo.name, repo.full_name
        self.url = sim.ctx.html(repo.full_name)
        self.owner = ActorNode(sim, repo.owner)

    def pullRequest(self, info, number: int) -> PullRequestNode:
        try:
            return PullRequestNode(self._sim, self._repo, self._sim.state.pr(self._repo, number))
        except NotFound:
            raise NotFoundError(f"Could not resolve to a PullRequest with the number of {number}.") from None


    async def object(self, info, oid: str | None = None, expression: str | None = None) -> CommitNode | None:
        sha = await self._sim.git.resolve(self._repo.git_dir, oid or expression or "")
        return CommitNode(self._sim, self._repo, sha) if sha else None


def _model(info: Any) -> GraphqlModel:
    """The model the request's context carries (`endpoint` puts it there)."""
    return info.context["sim"]


class QueryRoot:
    def repository(self, info, owner: str, name: str, followRenames=None) -> RepositoryNode:
        sim = _model(info)
        try:
            repo = sim.state.repo(owner, name)
            if not sim.installations.admits(info.context["token"], owner, public_read=not repo.private):
                raise NotFound(f"{owner}/{name}")  # another installation's private repository
            return RepositoryNode(sim, repo)
        except NotFound:
            raise NotFoundError(f"Could not resolve to a Repository with the name '{owner}/{name}'.") from None

    def rateLimit(self, info, dryRun=None) -> dict:
        bucket = info.context["bucket"]
        reset = datetime.fromtimestamp(bucket.reset, UTC)
        # The gateway charges this query after it runs; GitHub reports the balance after it.
        return {"cost": 1, "limit": bucket.limit, "nodeCount": 0,
                "remaining": max(0, bucket.remaining - 1), "resetAt": iso(reset),
                "used": bucket.used + 1}

    def viewer(self, info) -> ActorNode:
        return ActorNode(_model(info), info.context["actor"])


def _admitted(info, repo: str) -> bool:
    """Whether the request's installation token (if it is one) reaches `repo`: a node of
    another installation's repository does not resolve, as on GitHub."""
    return _model(info).installations.admits(info.context.get("token"), repo.split("/")[0])


class MutationRoot:
    async def _thread(self, info, thread_id: str, resolved: bool) -> ThreadNode:
        sim = _model(info)
        try:
            if not _admitted(info, sim.state.thread_by_node(thread_id).repo):
                raise NotFound(thread_id)
            thread = await sim.resolve_thread(thread_id, user=info.context["actor"],
                                              resolved=resolved)
        except NotFound:
            raise NotFoundError(f"Could not resolve to a node with the global id of '{thread_id}'.") from None
        repo, pr = sim.pr(thread.repo, thread.number)
        head = await sim.head_sha(repo, pr)
        outdated = await sim.is_outdated(repo, thread, head)
        sim.record("thread_resolved" if resolved else "thread_unresolved", info.context["actor"],
                   repo=repo.full_name, number=pr.number, thread_id=thread_id)
        return ThreadNode(sim, repo, thread, outdated, head)

    async def resolveReviewThread(self, info, input: dict) -> dict:
        return {"clientMutationId": input.get("clientMutationId"),
                "thread": await self._thread(info, input["threadId"], True)}

    async def unresolveReviewThread(self, info, input: dict) -> dict:
        return {"clientMutationId": input.get("clientMutationId"),
                "thread": await self._thread(info, input["threadId"], False)}

    async def addPullRequestReviewThreadReply(self, info, input: dict) -> dict:
        sim = _model(info)
        node = input["pullRequestReviewThreadId"]
        try:
            thread = sim.state.thread_by_node(node)
            if not _admitted(info, thread.repo):
                raise NotFound(node)
        except NotFound:
            raise NotFoundError(f"Could not resolve to a node with the global id of '{node}'.") from None
        c = await sim.reply(thread.repo, thread.number, thread.comment_ids[0],
                            body=input["body"], user=info.context["actor"])
        sim.record("review_reply", info.context["actor"], repo=thread.repo, number=thread.number,
                   id=c.id, in_reply_to=c.in_reply_to_id, body=c.body)
        repo, pr = sim.pr(thread.repo, thread.number)
        head = await sim.head_sha(repo, pr)
        return {"clientMutationId": input.get("clientMutationId"),
                "comment": CommentNode(sim, repo, c, await sim.is_outdated(repo, thread, head),
                                       head)}

    async def enqueuePullRequest(self, info, input: dict) -> dict:
        """Queue the PR; refused (UNPROCESSABLE) when `expectedHeadOid` is not its head. A PR
        already queued keeps its entry; each call that reached the queue is recorded."""
        sim, actor = _model(info), info.context["actor"]
        node, expected = input["pullRequestId"], input.get("expectedHeadOid")
        try:
            repo, pr = sim.queued_pr(node)
            if not _admitted(info, repo.full_name):
                raise NotFound(node)
        except NotFound:
            raise NotFoundError(f"Could not resolve to a node with the global id of '{node}'.") from None
        try:
            entry, new = await sim.enqueue_pr(repo.full_name, pr.number, actor=actor, expected_head=expected)
        except QueueError as e:
            sim.record("enqueue_refused", actor, repo=repo.full_name, number=pr.number,
                       expected_head=expected, message=e.message)
            raise UnprocessableError(e.message) from None
        sim.record("enqueue", actor, repo=repo.full_name, number=pr.number, entry=entry.node_id,
                   expected_head=expected, head=entry.head_sha, group_sha=entry.group_sha, new=new)
        found = sim.queue_entry(repo, pr)  # None: its group passed at once and merged
        return {"clientMutationId": input.get("clientMutationId"),
                "mergeQueueEntry": QueueEntryNode(sim, repo, *found) if found else None}


SCHEMA = build_schema(SDL)
for _abstract in ("Actor", "GitObject", "StatusCheckRollupContext"):
    cast(GraphQLInterfaceType | GraphQLUnionType, SCHEMA.type_map[_abstract]).resolve_type = (
        lambda value, info, abstract: value.typename)


def _error(error: GraphQLError) -> dict[str, Any]:
    data = cast(dict[str, Any], error.formatted)  # a TypedDict, a dict at run time
    if isinstance(error.original_error, NotFoundError) or isinstance(error, NotFoundError):
        data = {"type": "NOT_FOUND", **data}
    elif isinstance(error.original_error, UnprocessableError):
        data = {"type": "UNPROCESSABLE", **data}
    return data


# Parsed and validated documents by query text: the bot sends a handful of distinct queries,
# and graphql-core's parse and validate cost more than executing one (a fifth of the
# simulator's CPU in a 100-PR run). Errors are kept too: a bad query stays bad.
_DOCUMENTS: dict[str, DocumentNode | list[GraphQLError]] = {}
_DOCUMENTS_CAP = 256


def _document(query: str) -> DocumentNode | list[GraphQLError]:
    found = _DOCUMENTS.get(query)
    if found is None:
        try:
            doc = parse(query)
        except GraphQLError as e:
            found = [e]
        else:
            found = validate(SCHEMA, doc) or doc
        if len(_DOCUMENTS) >= _DOCUMENTS_CAP:
            _DOCUMENTS.clear()
        _DOCUMENTS[query] = found
    return found


async def endpoint(sim: GraphqlModel, req: ApiRequest) -> Reply:
    body = await req.json()
    query = body.get("query")
    if not isinstance(query, str) or not query.strip():
        return Reply({"errors": [{"message": "A query attribute must be specified and must be a string."}]})
    doc = _document(query)
    if isinstance(doc, list):
        return Reply({"errors": [_error(e) for e in doc]})
    key = token_of(req.request) or "anonymous"
    context = {"sim": sim, "actor": req.actor, "token": token_of(req.request),
               "bucket": sim.rate_limits.bucket("graphql", key)}
    result = execute(SCHEMA, doc, root_value=_Root(), context_value=context,
                     variable_values=body.get("variables"), operation_name=body.get("operationName"))
    if inspect.isawaitable(result):
        result = await result
    data: dict[str, Any] = {"data": result.data}
    if result.errors:
        data["errors"] = [_error(e) for e in result.errors]
        if result.data is None:
            data.pop("data")
    return Reply(data)


class _Root(QueryRoot, MutationRoot):
    """One root object serves queries and mutations: graphql-core reads fields off it by name."""


def routes(gw: Gateway[GraphqlModel]) -> list[Route]:
    return [gw.route("POST", "/graphql", endpoint, resource="graphql")]
