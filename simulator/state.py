"""The simulator's state: plain records of repos, PRs, reviews, threads, comments and checks.

Branch heads are NOT stored here: they live in the bare git repositories (see gitstore.py); the
ref cache re-checks the ref files on every request (refcache.py), so a real `git push` is seen
at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from .errors import NotFound
from .ids import IdAllocator, node_id, parse_node_id

COPILOT_LOGIN = "copilot-pull-request-reviewer[bot]"
ROLES = ("admin", "maintain", "write", "triage", "read")
MERGEABLE_STATES = ("clean", "unstable", "has_hooks", "behind", "dirty", "blocked", "unknown", "draft")
REVIEW_STATES = ("APPROVED", "CHANGES_REQUESTED", "COMMENTED", "DISMISSED", "PENDING")
REACTIONS = ("+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes")


@dataclass
class User:
    login: str
    id: int

    @property
    def node_id(self) -> str:
        return node_id("BOT" if self.is_bot else "U", self.id)

    @property
    def is_bot(self) -> bool:
        return self.login.endswith("[bot]")

    @property
    def type(self) -> str:
        return "Bot" if self.is_bot else "User"


@dataclass
class ThreadSpec:
    path: str
    line: int
    body: str


@dataclass
class ReviewStep:
    threads: list[ThreadSpec] = field(default_factory=list)
    body: str = ""
    state: str = "COMMENTED"


@dataclass
class ReviewerScript:
    """What a scripted reviewer answers, step by step, each time it is asked for a review."""

    steps: list[ReviewStep]
    login: str = COPILOT_LOGIN
    delay: float = 0.0
    auto: bool = False  # also review on its own whenever the head moves
    # A comment-triggered bot (CodeRabbit's "@coderabbitai review"): a PR comment holding this
    # text starts a review of the current head. "" for none.
    trigger: str = ""


@dataclass
class Repo:
    owner: str
    name: str
    id: int
    default_branch: str
    git_dir: Path
    created_at: datetime
    collaborators: dict[str, str] = field(default_factory=dict)  # login -> role
    reviewers: list[ReviewerScript] = field(default_factory=list)
    description: str | None = None
    next_number: int = 1
    fork_of: str | None = None  # the full name of the repository this one is a fork of
    # Public: any installation's token reads it (not writes to it), as on GitHub.
    private: bool = False
    # Branch protection's "require branches to be up to date": only then does GitHub report
    # `behind` (and refuse the merge) for a PR whose base moved on.
    require_up_to_date: bool = False
    # Branch protection's required status checks (check-run names or status contexts): until
    # each has succeeded on the head, GitHub reads the PR `blocked` and refuses the merge.
    required_checks: list[str] = field(default_factory=list)
    # Branch protection's required approving reviews (`required_approving_review_count`): until
    # that many users with write access approved the PR, and while one of them asks for
    # changes, GitHub reads it `blocked` and refuses the merge. 0: none required.
    required_approving_reviews: int = 0
    # "Automatically delete head branches": a merged PR's branch goes, and GitHub retargets the
    # open PRs based on it to the merged PR's base (simulator/ops/pulls.py `delete_branch`).
    delete_branch_on_merge: bool = False

    @property
    def fork(self) -> bool:
        return self.fork_of is not None

    @property
    def full_name(self) -> str:
        return f"{self.owner}/{self.name}"

    @property
    def node_id(self) -> str:
        return node_id("R", self.id)


@dataclass
class PullRequest:
    repo: str
    number: int
    id: int
    title: str
    body: str | None
    user: str
    head_ref: str
    base_ref: str
    created_at: datetime
    updated_at: datetime
    last_head: str  # the head last announced in a webhook; only used to detect moves
    last_base: str = ""  # frozen base sha once the PR is closed
    head_repo: str | None = None  # the fork holding `head_ref`; None: `repo` itself
    maintainer_can_modify: bool = False  # a fork's author lets maintainers push to its branch
    state: str = "open"
    draft: bool = False
    labels: list[str] = field(default_factory=list)
    closed_at: datetime | None = None
    merged_at: datetime | None = None
    merged_by: str | None = None
    merge_commit_sha: str | None = None
    mergeable_state: str | None = None  # None: computed from git (core.mergeability)
    requested_reviewers: list[str] = field(default_factory=list)
    reviewers: list[ReviewerScript] = field(default_factory=list)
    review_rounds: dict[str, int] = field(default_factory=dict)  # reviewer login -> steps used
    review_ids: list[int] = field(default_factory=list)
    thread_ids: list[int] = field(default_factory=list)
    review_comment_ids: list[int] = field(default_factory=list)
    issue_comment_ids: list[int] = field(default_factory=list)

    @property
    def node_id(self) -> str:
        return node_id("PR", self.id)

    @property
    def merged(self) -> bool:
        return self.merged_at is not None

    def mergeability(self, *, conflicts: bool = False, behind: bool = False,
                     checks: str = "passing", approved: bool = True) -> tuple[bool | None, str]:
        """(mergeable, mergeable_state): what a test set wins; else from what git found
        (`conflicts`: the head and base do not merge cleanly; `behind`: the base has commits
        the head lacks and the repository requires it up to date; `checks`: what the head's
        checks say against branch protection's required ones; `approved`: the reviews it
        requires are given, `State.review_decision`). A draft reads `draft`
        whatever else holds, though `mergeable` still tells its conflicts."""
        if self.state != "open":
            return None, "unknown"
        if self.mergeable_state is None:
            # `checks`: "blocking" (a required check has not succeeded), "failing" (another
            # check failed: GitHub's `unstable`) or "passing".
            state = ("draft" if self.draft else "dirty" if conflicts
                     else "blocked" if checks == "blocking" or not approved else "behind" if behind
                     else "unstable" if checks == "failing" else "clean")
            return not conflicts, state
        state = self.mergeable_state
        if state == "unknown":
            return None, state
        return state != "dirty", state


@dataclass
class Reaction:
    id: int
    user: str
    content: str
    created_at: datetime

    @property
    def node_id(self) -> str:
        return node_id("REA", self.id)


@dataclass
class Review:
    id: int
    repo: str
    number: int
    user: str
    body: str
    state: str
    commit_id: str
    submitted_at: datetime

    @property
    def node_id(self) -> str:
        return node_id("PRR", self.id)


@dataclass
class ReviewThread:
    id: int
    repo: str
    number: int
    path: str
    line: int
    commit_id: str  # the commit the thread was opened on
    comment_ids: list[int] = field(default_factory=list)
    resolved_by: str | None = None

    @property
    def node_id(self) -> str:
        return node_id("PRRT", self.id)

    @property
    def is_resolved(self) -> bool:
        return self.resolved_by is not None


@dataclass
class ReviewComment:
    id: int
    repo: str
    number: int
    thread_id: int
    review_id: int | None
    user: str
    body: str
    path: str
    line: int
    commit_id: str
    created_at: datetime
    updated_at: datetime
    in_reply_to_id: int | None = None
    reactions: list[Reaction] = field(default_factory=list)

    @property
    def node_id(self) -> str:
        return node_id("PRRC", self.id)


@dataclass
class IssueComment:
    id: int
    repo: str
    number: int
    user: str
    body: str
    created_at: datetime
    updated_at: datetime
    reactions: list[Reaction] = field(default_factory=list)

    @property
    def node_id(self) -> str:
        return node_id("IC", self.id)


@dataclass
class CheckSuite:
    id: int
    repo: str
    head_sha: str
    head_branch: str | None
    app: str
    created_at: datetime
    updated_at: datetime
    run_ids: list[int] = field(default_factory=list)

    @property
    def node_id(self) -> str:
        return node_id("CS", self.id)


@dataclass
class CheckRun:
    id: int
    repo: str
    head_sha: str
    name: str
    suite_id: int
    app: str
    status: str = "queued"
    conclusion: str | None = None
    started_at: datetime | None = None
    completed_at: datetime | None = None
    output: dict = field(default_factory=dict)
    details_url: str | None = None
    external_id: str | None = None
    annotations: list[dict] = field(default_factory=list)  # appended by each write's output

    @property
    def node_id(self) -> str:
        return node_id("CR", self.id)


@dataclass
class CommitStatus:
    id: int
    repo: str
    sha: str
    state: str
    context: str
    creator: str
    created_at: datetime
    updated_at: datetime
    description: str | None = None
    target_url: str | None = None

    @property
    def node_id(self) -> str:
        return node_id("SC", self.id)


@dataclass
class QueueEntry:
    """A PR in a merge queue, and the merge group built for it: the group's base (the branch,
    or the group of the entry ahead) with the PR's head merged in, at `ref`."""

    id: int
    number: int
    head_sha: str  # the PR's head when it was queued
    enqueuer: str
    enqueued_at: datetime
    base_sha: str = ""
    group_sha: str = ""
    ref: str = ""  # gh-readonly-queue/{base}/pr-{number}-{head_sha}

    @property
    def node_id(self) -> str:
        return node_id("MQE", self.id)


@dataclass
class MergeQueue:
    """A base branch that takes changes only through its merge queue: each entry's merge group
    must pass `required_checks` before the branch moves to it."""

    repo: str
    branch: str
    required_checks: list[str] = field(default_factory=list)
    entries: list[QueueEntry] = field(default_factory=list)


class State:
    """Every record by id, plus lookups that answer 404 the way GitHub does."""

    def __init__(self) -> None:
        self.new_id = IdAllocator()
        self.users: dict[str, User] = {}
        self.repos: dict[str, Repo] = {}
        self.prs: dict[tuple[str, int], PullRequest] = {}
        self.reviews: dict[int, Review] = {}
        self.threads: dict[int, ReviewThread] = {}
        self.review_comments: dict[int, ReviewComment] = {}
        self.issue_comments: dict[int, IssueComment] = {}
        self.check_suites: dict[int, CheckSuite] = {}
        self.check_runs: dict[int, CheckRun] = {}
        self.statuses: list[CommitStatus] = []
        self.merge_queues: dict[tuple[str, str], MergeQueue] = {}  # (repo, branch) -> queue
        # Lookups by what requests name, kept by `add_pr`, `add_check_suite`, `add_check_run`
        # (records are never removed, and what they are found by never changes). Scanning
        # every record instead made each request cost in proportion to the PRs of the whole
        # simulator (BENCHMARKS.md at acb9095, "2 December, afternoon").
        self._prs_by_repo: dict[str, list[PullRequest]] = {}
        self._prs_by_head_repo: dict[str, list[PullRequest]] = {}
        self._suites_by_commit: dict[tuple[str, str, str], CheckSuite] = {}  # (repo, sha, app)
        self._runs_by_commit: dict[tuple[str, str], list[CheckRun]] = {}  # (repo, sha), oldest first
        self._repos_by_id: dict[int, Repo] = {}

    def user(self, login: str) -> User:
        """Users exist as soon as they are named; ids stay stable per login."""
        found = self.users.get(login.lower())
        if found is None:
            found = self.users[login.lower()] = User(login=login, id=self.new_id())
        return found

    def repo(self, owner: str, name: str) -> Repo:
        found = self.repos.get(f"{owner}/{name}".lower())
        if found is None:
            raise NotFound(f"repository {owner}/{name}")
        return found

    def repo_by_id(self, repository_id: int) -> Repo | None:
        return self._repos_by_id.get(repository_id)

    def add_repo(self, repo: Repo) -> None:
        self.repos[repo.full_name.lower()] = repo
        self._repos_by_id[repo.id] = repo

    def add_pr(self, pr: PullRequest) -> None:
        self.prs[(pr.repo, pr.number)] = pr
        self._prs_by_repo.setdefault(pr.repo, []).append(pr)
        self._prs_by_head_repo.setdefault(pr.head_repo or pr.repo, []).append(pr)

    def add_check_suite(self, suite: CheckSuite) -> None:
        self.check_suites[suite.id] = suite
        self._suites_by_commit[(suite.repo, suite.head_sha, suite.app)] = suite

    def add_check_run(self, run: CheckRun) -> None:
        self.check_runs[run.id] = run
        self._runs_by_commit.setdefault((run.repo, run.head_sha), []).append(run)

    def check_suite_at(self, repo: Repo, sha: str, app: str) -> CheckSuite | None:
        return self._suites_by_commit.get((repo.full_name, sha, app))

    def check_runs_at(self, repo: Repo, sha: str) -> list[CheckRun]:
        """The runs on `sha` in `repo`, oldest first."""
        return list(self._runs_by_commit.get((repo.full_name, sha), ()))

    def pr(self, repo: Repo, number: int) -> PullRequest:
        found = self.prs.get((repo.full_name, number))
        if found is None:
            raise NotFound(f"pull request {repo.full_name}#{number}")
        return found

    def prs_of(self, repo: Repo) -> list[PullRequest]:
        return list(self._prs_by_repo.get(repo.full_name, ()))

    def prs_headed_in(self, repo: Repo) -> list[PullRequest]:
        """PRs whose head branch lives in `repo`: its own, and those opened from it as a fork."""
        return list(self._prs_by_head_repo.get(repo.full_name, ()))

    def thread_by_node(self, node: str) -> ReviewThread:
        found = self.threads.get(parse_node_id(node, "PRRT") or -1)
        if found is None:
            raise NotFound(f"thread {node}")
        return found

    def issue_comment(self, repo: Repo, comment_id: int) -> IssueComment:
        found = self.issue_comments.get(comment_id)
        if found is None or found.repo != repo.full_name:
            raise NotFound(f"issue comment {comment_id}")
        return found

    def review_comment(self, repo: Repo, comment_id: int) -> ReviewComment:
        found = self.review_comments.get(comment_id)
        if found is None or found.repo != repo.full_name:
            raise NotFound(f"review comment {comment_id}")
        return found

    def check_run(self, repo: Repo, run_id: int) -> CheckRun:
        found = self.check_runs.get(run_id)
        if found is None or found.repo != repo.full_name:
            raise NotFound(f"check run {run_id}")
        return found

    def review_decision(self, repo: Repo, pr: PullRequest) -> str | None:
        """GitHub's `reviewDecision` under branch protection's required approving reviews: None
        where none are required; else what each user with write access (the author aside) said
        last, approving or asking for changes (a comment says neither, a dismissal undoes it):
        one change request holds the PR however many approve it."""
        if repo.required_approving_reviews <= 0:
            return None
        last: dict[str, str] = {}
        for review_id in pr.review_ids:
            review = self.reviews[review_id]
            login = review.user.lower()
            if (review.state in ("APPROVED", "CHANGES_REQUESTED", "DISMISSED") and login != pr.user.lower()
                    and self.role(repo, review.user) in ("admin", "maintain", "write")):
                last[login] = review.state
        if "CHANGES_REQUESTED" in last.values():
            return "CHANGES_REQUESTED"
        approvals = sum(1 for said in last.values() if said == "APPROVED")
        return "APPROVED" if approvals >= repo.required_approving_reviews else "REVIEW_REQUIRED"

    def role(self, repo: Repo, login: str) -> str | None:
        if login.lower() == repo.owner.lower():
            return "admin"
        for name, role in repo.collaborators.items():
            if name.lower() == login.lower():
                return role
        return None
