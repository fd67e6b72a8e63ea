"""What the bot reads of each answer GitHub sends, as GitHub's API documents it: the fields some
caller reads, each with its type, required where GitHub always sends it and the caller counts
on it, `None` allowed where GitHub documents null. Fields no caller reads are not named, so an
answer with more (or GitHub adding fields) passes. `answers.checked` holds an answer to one.

A GraphQL answer names every field its query asks for (null or not), so there none has a
default; a GitHub `nodes` list may be null, or hold nulls (each reader skips them)."""

from __future__ import annotations

from typing import Any

from msgspec import Struct


class _Shape(Struct):
    """Unknown fields are ignored (msgspec's default)."""


# -- REST ------------------------------------------------------------------------------------


class User(_Shape):
    login: str
    type: str | None = None


class Repository(_Shape):
    full_name: str
    clone_url: str | None = None


class Branch(_Shape):
    ref: str
    sha: str
    repo: Repository | None = None  # null for a fork that is gone


class Label(_Shape):
    name: str


class Team(_Shape):
    slug: str


class Pull(_Shape):
    """A PR, alone (`merged`, `mergeable_state`) or in a listing (`pull-request-simple`)."""

    number: int
    state: str
    title: str
    html_url: str
    head: Branch
    base: Branch
    updated_at: str
    user: User | None = None
    body: str | None = None
    labels: list[Label] = []
    merged: bool | None = None
    merged_at: str | None = None
    mergeable_state: str | None = None
    maintainer_can_modify: bool | None = None
    requested_reviewers: list[User | None] | None = None
    requested_teams: list[Team | None] | None = None


class Review(_Shape):
    id: int
    state: str
    user: User | None = None
    commit_id: str | None = None
    submitted_at: str | None = None
    body: str | None = None


class RequestedReviewers(_Shape):
    users: list[User]


class Comment(_Shape):
    """An issue comment, or a review comment on a PR's diff."""

    id: int
    html_url: str
    created_at: str
    updated_at: str
    user: User | None = None
    body: str | None = None


class Created(_Shape):
    """What a write's answer is read for: the id of what it made."""

    id: int


class App(_Shape):
    slug: str | None = None


class CheckOutput(_Shape):
    title: str | None = None
    summary: str | None = None
    annotations_count: int = 0


class CheckRun(_Shape):
    id: int
    name: str
    status: str
    conclusion: str | None = None
    details_url: str | None = None
    html_url: str | None = None
    app: App | None = None
    output: CheckOutput | None = None


class CheckRuns(_Shape):
    check_runs: list[CheckRun]


class Annotation(_Shape):
    path: str
    start_line: int
    annotation_level: str | None = None
    message: str | None = None


class Status(_Shape):
    context: str
    state: str
    description: str | None = None
    target_url: str | None = None


class CombinedStatus(_Shape):
    statuses: list[Status]


class Contents(_Shape):
    """A path's contents: a file's (base64 `content`), or a symlink's or submodule's; a
    directory's is a list instead."""

    type: str
    sha: str
    content: str | None = None
    encoding: str | None = None


class Commit(_Shape):
    sha: str


class Ref(_Shape):
    object: Commit


class ChangedFile(_Shape):
    filename: str
    previous_filename: str | None = None


class Comparison(_Shape):
    merge_base_commit: Commit
    files: list[ChangedFile] = []


class Permission(_Shape):
    permission: str
    role_name: str | None = None


class Installation(_Shape):
    id: int
    account: dict[str, Any] | None = None  # a user's or an organisation's, or an enterprise's


class Token(_Shape):
    token: str
    expires_at: str | None = None


class Named(_Shape):
    full_name: str


class InstallationRepositories(_Shape):
    repositories: list[Named]


class Bucket(_Shape):
    limit: int
    remaining: int


class Resources(_Shape):
    core: Bucket


class RateLimit(_Shape):
    resources: Resources


# A delivery log's entries are read one by one, each left out when it is not well formed
# (`bot/intake/redelivery.py`): a page is only a list.
DELIVERIES = list[Any]


# -- GraphQL ---------------------------------------------------------------------------------


class PageInfo(_Shape):
    hasNextPage: bool
    endCursor: str | None


class Author(_Shape):
    login: str


class ThreadComment(_Shape):
    fullDatabaseId: str | int | None  # a BigInt, sent as a string of digits
    body: str | None
    author: Author | None  # null: a deleted account


class ThreadComments(_Shape):
    nodes: list[ThreadComment | None] | None


class Thread(_Shape):
    id: str
    isResolved: bool
    isOutdated: bool
    path: str
    line: int | None
    comments: ThreadComments


class ThreadPage(_Shape):
    pageInfo: PageInfo
    nodes: list[Thread | None] | None


class PullThreads(_Shape):
    reviewThreads: ThreadPage


class RepositoryThreads(_Shape):
    pullRequest: PullThreads | None


class Threads(_Shape):
    repository: RepositoryThreads | None


class SuiteApp(_Shape):
    slug: str


class Suite(_Shape):
    app: SuiteApp | None


class CheckRunNode(_Shape, tag_field="__typename", tag="CheckRun"):
    name: str
    status: str
    conclusion: str | None
    checkSuite: Suite | None


class StatusNode(_Shape, tag_field="__typename", tag="StatusContext"):
    context: str
    state: str


class MorePages(_Shape):
    hasNextPage: bool


class Contexts(_Shape):
    pageInfo: MorePages
    nodes: list[CheckRunNode | StatusNode | None] | None


class Rollup(_Shape):
    contexts: Contexts


class HeadCommit(_Shape):
    statusCheckRollup: Rollup | None = None  # absent: the object is no commit


class RepositoryReviewState(_Shape):
    pullRequest: PullThreads | None
    object: HeadCommit | None


class ReviewState(_Shape):
    repository: RepositoryReviewState | None


class RequiredRun(_Shape, tag_field="__typename", tag="CheckRun"):
    name: str
    isRequired: bool


class RequiredStatus(_Shape, tag_field="__typename", tag="StatusContext"):
    context: str
    isRequired: bool


class RequiredContexts(_Shape):
    nodes: list[RequiredRun | RequiredStatus | None] | None


class RequiredRollup(_Shape):
    contexts: RequiredContexts


class RequiredCommit(_Shape):
    statusCheckRollup: RequiredRollup | None = None


class RequiredRule(_Shape):
    requiredStatusCheckContexts: list[str | None] | None = None


class RequiredRef(_Shape):
    refUpdateRule: RequiredRule | None = None


class RequiredPull(_Shape):
    baseRef: RequiredRef | None = None


class RepositoryRequired(_Shape):
    object: RequiredCommit | None
    pullRequest: RequiredPull | None = None


class RequiredChecks(_Shape):
    repository: RepositoryRequired | None


class ReviewRule(_Shape):
    requiredApprovingReviewCount: int | None
    requiresCodeOwnerReviews: bool


class ReviewRuleRef(_Shape):
    refUpdateRule: ReviewRule | None


class ReviewDecisionPull(_Shape):
    reviewDecision: str | None
    baseRef: ReviewRuleRef | None


class RepositoryReviewDecision(_Shape):
    pullRequest: ReviewDecisionPull | None


class ReviewRequirement(_Shape):
    repository: RepositoryReviewDecision | None


class Oid(_Shape):
    oid: str


class QueueEntry(_Shape):
    id: str
    state: str
    position: int | None
    headCommit: Oid | None


class QueuedPull(_Shape):
    id: str
    state: str
    headRefOid: str
    isMergeQueueEnabled: bool
    isInMergeQueue: bool
    mergeQueueEntry: QueueEntry | None


class RepositoryQueue(_Shape):
    pullRequest: QueuedPull | None


class MergeQueue(_Shape):
    repository: RepositoryQueue | None


class Enqueued(_Shape):
    mergeQueueEntry: QueueEntry | None


class Enqueue(_Shape):
    enqueuePullRequest: Enqueued | None
