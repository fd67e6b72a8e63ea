"""Merge queues: a base branch that takes a PR only through its queue, as GitHub's does.

Each entry gets a merge group: the group ahead of it (or the branch) with the PR's head merged
in, a real commit at `gh-readonly-queue/{base}/pr-{number}-{head}`, announced by a
`merge_group` `checks_requested` webhook. The queue's required checks run on the group's sha
(a test reports them with `set_check_run` or `set_status`). When they all pass, the branch
fast-forwards to the group of the first entry and its PR is merged; when one fails, the entry
is removed (`merge_group` `destroyed`, `pull_request` `dequeued`), and the groups behind it,
which held its changes, are built again without them.
"""

from __future__ import annotations

from ..core import SimulatorCore
from ..errors import NotFound, Unprocessable
from ..gitstore import ZERO_SHA, RefMoved
from ..ids import now, parse_node_id
from ..shapes.commits import head_commit
from ..state import MergeQueue, PullRequest, QueueEntry, Repo

QUEUE_PREFIX = "gh-readonly-queue"
REQUIRED_BY_QUEUE = "Changes must be made through the merge queue"
# A check (run conclusion or status state) GitHub counts as passing; pending is neither.
PASSING = frozenset({"success", "neutral", "skipped"})


class QueueError(Unprocessable):
    """GitHub refuses to queue the PR (a GraphQL error of the enqueue mutation)."""


class QueueOps(SimulatorCore):
    # -- settings and lookups ----------------------------------------------------------------

    async def require_merge_queue(self, repo_name: str, branch: str | None = None, *,
                                  checks: list[str] | tuple[str, ...] = (),
                                  required: bool = True) -> MergeQueue | None:
        """Make `branch` (the default branch if None) take changes only through a merge queue
        whose groups must pass `checks`; `required=False` turns the queue off (entries left
        in it are dropped without webhooks). GitHub sends no webhook for the setting."""
        repo = self.repo(repo_name)
        branch = branch or repo.default_branch
        key = (repo.full_name, branch)
        async with self.lock:
            if not required:
                for entry in self.state.merge_queues.pop(key, MergeQueue(*key)).entries:
                    await self._drop_ref(repo, entry)
                return None
            queue = self.state.merge_queues.setdefault(key, MergeQueue(*key))
            queue.required_checks = list(checks)
            await self._advance(repo, queue)  # a required check fewer may let an entry through
        return queue

    def merge_queue(self, repo: Repo, branch: str) -> MergeQueue | None:
        return self.state.merge_queues.get((repo.full_name, branch))

    def queue_entry(self, repo: Repo, pr: PullRequest) -> tuple[MergeQueue, int, QueueEntry] | None:
        """The PR's queue, its 1-based position and its entry, if it is queued."""
        queue = self.merge_queue(repo, pr.base_ref)
        if queue is None:
            return None
        for i, entry in enumerate(queue.entries):
            if entry.number == pr.number:
                return queue, i + 1, entry
        return None

    def entry_state(self, repo: Repo, queue: MergeQueue, entry: QueueEntry) -> str:
        """GitHub's MergeQueueEntryState: MERGEABLE once the group's checks passed (it waits
        only for the entries ahead), UNMERGEABLE once one failed, else AWAITING_CHECKS."""
        verdict = self._verdict(repo, queue, entry.group_sha)
        return {"pass": "MERGEABLE", "fail": "UNMERGEABLE"}.get(verdict, "AWAITING_CHECKS")

    # -- queueing ---------------------------------------------------------------------------

    async def enqueue_pr(self, repo_name: str, number: int, *, actor: str,
                         expected_head: str | None = None) -> tuple[QueueEntry, bool]:
        """enqueuePullRequest: (the entry, whether this call queued it). A PR already queued
        keeps its entry: asking again is no second entry."""
        repo, pr = self.pr(repo_name, number)
        async with self.lock:
            queue = self.merge_queue(repo, pr.base_ref)
            if queue is None:
                raise QueueError(f"Merge queue is not enabled for the branch {pr.base_ref}", "pullRequestId")
            if pr.state != "open":
                raise QueueError("Pull request is closed", "pullRequestId")
            if pr.draft:
                raise QueueError("Pull request is still a draft", "pullRequestId")
            heads = await self.heads(repo, pr)
            if expected_head is not None and expected_head != heads.head:
                raise QueueError(f"Expected head oid {expected_head} does not match the pull request's "
                                 f"head {heads.head}", "expectedHeadOid")
            found = self.queue_entry(repo, pr)
            if found is not None:
                return found[2], False
            mergeable, _ = await self.mergeability(repo, pr, heads)
            if mergeable is False:
                raise QueueError("Pull request is not mergeable", "pullRequestId")
            entry = QueueEntry(id=self.state.new_id(), number=pr.number, head_sha=heads.head,
                               enqueuer=actor, enqueued_at=now())
            queue.entries.append(entry)
            if not await self._build(repo, queue, entry):
                queue.entries.remove(entry)
                raise QueueError("Pull request conflicts with the merge groups ahead of it", "pullRequestId")
            await self.emit_pr("enqueued", repo, pr, actor)
            await self._emit_group(repo, queue, entry, "checks_requested", actor)
            await self._advance(repo, queue)
        return entry, True

    async def _build(self, repo: Repo, queue: MergeQueue, entry: QueueEntry) -> bool:
        """Build the entry's merge group on the group ahead (or the branch); False on a conflict."""
        i = queue.entries.index(entry)
        if i:
            base = queue.entries[i - 1].group_sha
        else:
            base = await self.git.branch_sha(repo.git_dir, queue.branch) or ""
        tree = await self.git.merge_tree(repo.git_dir, base, entry.head_sha)
        if tree is None:
            return False
        pr = self.state.pr(repo, entry.number)
        owner = self.head_repo(repo, pr).owner
        # The entry's id keeps each group its own commit: a PR queued again on the same base
        # within the same second must not find the checks of its last group on the new one.
        message = (f"Merge pull request #{pr.number} from {owner}/{pr.head_ref}\n\n{pr.title}\n\n"
                   f"Merge queue entry: {entry.node_id}\n")
        group = await self.git.commit_tree(repo.git_dir, tree, [base, entry.head_sha], message,
                                           self.author(entry.enqueuer))
        if entry.ref:
            await self._drop_ref(repo, entry)
        entry.base_sha, entry.group_sha = base, group
        entry.ref = f"{QUEUE_PREFIX}/{queue.branch}/pr-{pr.number}-{entry.head_sha}"
        await self.git.update_ref(repo.git_dir, entry.ref, group, ZERO_SHA)
        return True

    async def _drop_ref(self, repo: Repo, entry: QueueEntry) -> None:
        await self.git.run(repo.git_dir, "update-ref", "-d", f"refs/heads/{entry.ref}")
        self.git.invalidate(repo.git_dir)

    async def _emit_group(self, repo: Repo, queue: MergeQueue, entry: QueueEntry, action: str,
                          sender: str, **extra) -> None:
        info = await self.git.commit_info(repo.git_dir, entry.group_sha)
        self.emit("merge_group", repo, sender, action, merge_group={
            "head_sha": entry.group_sha, "head_ref": f"refs/heads/{entry.ref}",
            "base_sha": entry.base_sha, "base_ref": f"refs/heads/{queue.branch}",
            "head_commit": head_commit(info)}, **extra)

    # -- checks, merging and removal (under the lock) ------------------------------------------

    def _verdict(self, repo: Repo, queue: MergeQueue, sha: str) -> str:
        """pass, fail or pending: the group's required checks, by their newest run or status."""
        seen: dict[str, str | None] = {}  # a conclusion, a status's state, or "pending"
        for run in self.latest_runs(repo, sha):
            if run.name in queue.required_checks and run.name not in seen:
                seen[run.name] = run.conclusion if run.status == "completed" else "pending"
        for st in self.latest_statuses(repo, sha):
            if st.context in queue.required_checks and st.context not in seen:
                seen[st.context] = st.state
        if any(v not in PASSING and v != "pending" for v in seen.values()):
            return "fail"
        if len(seen) == len(set(queue.required_checks)) and all(v in PASSING for v in seen.values()):
            return "pass"
        return "pending"

    async def queue_checks_changed(self, repo: Repo, sha: str) -> None:
        """A check run completed or a status was set on `sha`: the queue it gates moves on."""
        for queue in list(self.state.merge_queues.values()):
            if queue.repo == repo.full_name and any(e.group_sha == sha for e in queue.entries):
                await self._advance(repo, queue)

    async def _advance(self, repo: Repo, queue: MergeQueue) -> None:
        """Remove every entry whose group failed; merge the first while its group passed."""
        for entry in list(queue.entries):
            if entry in queue.entries and self._verdict(repo, queue, entry.group_sha) == "fail":
                await self._remove(repo, queue, entry, "dequeued", "CI_FAILURE")
        while queue.entries and self._verdict(repo, queue, queue.entries[0].group_sha) == "pass":
            if not await self._merge_first(repo, queue):
                return

    async def _merge_first(self, repo: Repo, queue: MergeQueue) -> bool:
        """Fast-forward the branch to the first group and merge its PR; False if the branch moved
        under the queue (the groups are built again on it instead)."""
        entry = queue.entries[0]
        pr = self.state.pr(repo, entry.number)
        try:
            await self.git.update_ref(repo.git_dir, queue.branch, entry.group_sha, entry.base_sha)
        except RefMoved:
            await self._rebuild(repo, queue, 0, entry.enqueuer)
            return False
        # Out of the queue and merged in one move (no await between): a read in between would
        # see an open PR that left the queue, as if it had been removed.
        queue.entries.pop(0)
        stamp = now()
        pr.state, pr.closed_at, pr.merged_at, pr.updated_at = "closed", stamp, stamp, stamp
        pr.merged_by, pr.merge_commit_sha = entry.enqueuer, entry.group_sha
        pr.last_head, pr.last_base = entry.head_sha, entry.base_sha
        await self._drop_ref(repo, entry)
        self.record("merge", entry.enqueuer, repo=repo.full_name, number=pr.number, sha=entry.group_sha,
                    method="merge_queue", expected_head=entry.head_sha)
        await self._emit_push(repo, f"refs/heads/{queue.branch}", entry.base_sha, entry.group_sha,
                              entry.enqueuer, via="merge_queue")
        await self.emit_pr("closed", repo, pr, entry.enqueuer)
        await self._emit_group(repo, queue, entry, "destroyed", entry.enqueuer, reason="merged")
        await self.emit_pr("dequeued", repo, pr, entry.enqueuer, reason="MERGE")
        return True

    async def _remove(self, repo: Repo, queue: MergeQueue, entry: QueueEntry, why: str,
                      reason: str) -> None:
        """Take the entry out (its group `destroyed` with `why`, its PR `dequeued` for `reason`)
        and build the groups behind it again without its changes."""
        i = queue.entries.index(entry)
        queue.entries.pop(i)
        await self._drop_ref(repo, entry)
        pr = self.state.pr(repo, entry.number)
        pr.updated_at = now()
        await self._emit_group(repo, queue, entry, "destroyed", entry.enqueuer, reason=why)
        await self.emit_pr("dequeued", repo, pr, entry.enqueuer, reason=reason)
        await self._rebuild(repo, queue, i, entry.enqueuer)

    async def _rebuild(self, repo: Repo, queue: MergeQueue, start: int, sender: str) -> None:
        """The groups from `start` on held what changed ahead of them: each is invalidated and
        built again (an entry that no longer merges is removed)."""
        for entry in list(queue.entries[start:]):
            if entry not in queue.entries:
                continue
            await self._emit_group(repo, queue, entry, "destroyed", sender, reason="invalidated")
            if await self._build(repo, queue, entry):
                await self._emit_group(repo, queue, entry, "checks_requested", sender)
            else:
                queue.entries.remove(entry)
                await self._drop_ref(repo, entry)
                await self.emit_pr("dequeued", repo, self.state.pr(repo, entry.number), sender,
                                   reason="MERGE_CONFLICT")

    async def queue_head_moved(self, repo: Repo, pr: PullRequest) -> None:
        """A push to a queued PR's branch takes it out of the queue: its group is not its head."""
        found = self.queue_entry(repo, pr)
        if found is not None and found[2].head_sha != pr.last_head:
            await self._remove(repo, found[0], found[2], "dequeued", "UNKNOWN_REMOVAL_REASON")

    def queued_pr(self, node: str) -> tuple[Repo, PullRequest]:
        """The PR a GraphQL node id names (enqueuePullRequest's pullRequestId)."""
        pr_id = parse_node_id(node, "PR")
        for (repo_name, _), pr in self.state.prs.items():
            if pr.id == pr_id:
                return self.repo(repo_name), pr
        raise NotFound(f"pull request {node}")
