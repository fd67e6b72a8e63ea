"""Reviews, review threads and their comments; when a thread goes outdated."""

from __future__ import annotations

from collections.abc import Iterable

from ..core import SimulatorCore
from ..errors import Unprocessable
from ..events import thread_fields
from ..ids import now
from ..shapes.reviews import review as render_review
from ..shapes.reviews import review_comment as render_comment
from ..state import (
    REVIEW_STATES,
    PullRequest,
    Repo,
    Review,
    ReviewComment,
    ReviewThread,
    ThreadSpec,
)

# The review "event" words GitHub's create-review API takes, and the state each one leaves.
_EVENT_STATES = {"APPROVE": "APPROVED", "REQUEST_CHANGES": "CHANGES_REQUESTED",
                 "COMMENT": "COMMENTED"}

# A thread is outdated when the commented line or this many lines around it changed on the
# current head (or the file is gone): close to GitHub, which outdates a comment whose diff
# hunk changed, while a fix elsewhere in the same file leaves other threads current.
OUTDATED_CONTEXT = 3


def review_state(value: str) -> str:
    state = _EVENT_STATES.get(value.upper(), value.upper())
    if state not in REVIEW_STATES:
        raise Unprocessable(f"review state must be one of {', '.join(REVIEW_STATES)}", "state")
    return state


def window(text: bytes | None, line: int) -> list[bytes] | None:
    if text is None:
        return None
    lines = text.splitlines()
    return lines[max(0, line - 1 - OUTDATED_CONTEXT):line + OUTDATED_CONTEXT]


class ReviewOps(SimulatorCore):
    async def submit_review(self, repo_name: str, number: int, *, user: str, body: str = "",
                            state: str = "COMMENTED",
                            threads: Iterable[ThreadSpec | dict] = (),
                            commit_id: str | None = None) -> Review:
        """Submit a review of `commit_id` (default: the current head), opening one unresolved
        thread per entry of `threads`. Clears the reviewer's pending request."""
        repo, pr = self.pr(repo_name, number)
        state = review_state(state)
        specs = [t if isinstance(t, ThreadSpec) else ThreadSpec(**t) for t in threads]
        async with self.lock:
            commit = commit_id or await self.head_sha(repo, pr)
            stamp = now()
            review = Review(id=self.state.new_id(), repo=repo.full_name, number=pr.number,
                            user=user, body=body, state=state, commit_id=commit,
                            submitted_at=stamp)
            self.state.reviews[review.id] = review
            pr.review_ids.append(review.id)
            comments = [self._open_thread(repo, pr, review, spec) for spec in specs]
            if user in pr.requested_reviewers:
                pr.requested_reviewers.remove(user)
            pr.updated_at = stamp
            await self._emit_review(repo, pr, review, comments)
        return review

    def _open_thread(self, repo: Repo, pr: PullRequest, review: Review,
                     spec: ThreadSpec) -> ReviewComment:
        thread = ReviewThread(id=self.state.new_id(), repo=repo.full_name, number=pr.number,
                              path=spec.path, line=spec.line, commit_id=review.commit_id)
        self.state.threads[thread.id] = thread
        pr.thread_ids.append(thread.id)
        return self._add_comment(pr, thread, review.id, review.user, spec.body, None)

    def _add_comment(self, pr: PullRequest, thread: ReviewThread, review_id: int | None,
                     user: str, body: str, reply_to: int | None) -> ReviewComment:
        stamp = now()
        comment = ReviewComment(id=self.state.new_id(), repo=thread.repo, number=thread.number,
                                thread_id=thread.id, review_id=review_id, user=user, body=body,
                                path=thread.path, line=thread.line, commit_id=thread.commit_id,
                                created_at=stamp, updated_at=stamp, in_reply_to_id=reply_to)
        self.state.review_comments[comment.id] = comment
        thread.comment_ids.append(comment.id)
        pr.review_comment_ids.append(comment.id)
        return comment

    async def _emit_review(self, repo: Repo, pr: PullRequest, review: Review,
                           comments: list[ReviewComment]) -> None:
        # Comments first: a receiver that reacts to the review finds its threads complete.
        pull = await self.pr_json(repo, pr)
        head = await self.head_sha(repo, pr)
        for comment in comments:
            outdated = await self.is_outdated(repo, self.state.threads[comment.thread_id], head)
            rendered = render_comment(self.ctx, repo, comment, head=head, outdated=outdated)
            self.emit("pull_request_review_comment", repo, comment.user, "created",
                      comment=rendered, pull_request=pull)
        self.emit("pull_request_review", repo, review.user, "submitted",
                  review=render_review(self.ctx, repo, review), pull_request=pull)

    async def reply(self, repo_name: str, number: int, comment_id: int, *, body: str,
                    user: str) -> ReviewComment:
        """Reply in the thread of review comment `comment_id`. Like GitHub, the reply comes with
        its own single-comment COMMENTED review by the replier (so bots must filter by author)."""
        repo, pr = self.pr(repo_name, number)
        target = self.state.review_comment(repo, comment_id)
        if target.number != pr.number:
            raise Unprocessable("comment is not on this pull request", "comment_id")
        async with self.lock:
            thread = self.state.threads[target.thread_id]
            head = await self.head_sha(repo, pr)
            review = Review(id=self.state.new_id(), repo=repo.full_name, number=pr.number,
                            user=user, body="", state="COMMENTED", commit_id=head,
                            submitted_at=now())
            self.state.reviews[review.id] = review
            pr.review_ids.append(review.id)
            comment = self._add_comment(pr, thread, review.id, user, body,
                                        thread.comment_ids[0])
            await self._emit_review(repo, pr, review, [comment])
        return comment

    async def resolve_thread(self, node_id: str, *, user: str,
                             resolved: bool = True) -> ReviewThread:
        thread = self.state.thread_by_node(node_id)
        repo, pr = self.pr(thread.repo, thread.number)
        async with self.lock:
            if thread.is_resolved == resolved:
                return thread
            thread.resolved_by = user if resolved else None
            head = await self.head_sha(repo, pr)
            outdated = await self.is_outdated(repo, thread, head)
            comments = [render_comment(self.ctx, repo, self.state.review_comments[c], head=head,
                                       outdated=outdated) for c in thread.comment_ids]
            self.emit("pull_request_review_thread", repo, user,
                      "resolved" if resolved else "unresolved",
                      thread=thread_fields(comments, thread.node_id),
                      pull_request=await self.pr_json(repo, pr))
        return thread

    async def is_outdated(self, repo: Repo, thread: ReviewThread, head: str) -> bool:
        if head == thread.commit_id:
            return False
        key = (thread.commit_id, head, thread.path, thread.line)
        if key not in self._outdated_cache:  # both commits are immutable: the answer is too
            then = await self.git.read_blob(repo.git_dir, thread.commit_id, thread.path)
            current = await self.git.read_blob(repo.git_dir, head, thread.path)
            self._outdated_cache[key] = current is None or (
                window(then and then[1], thread.line) != window(current[1], thread.line))
        return self._outdated_cache[key]

    async def threads_of(self, repo: Repo, pr: PullRequest) -> list[tuple[ReviewThread, bool]]:
        """Every thread of the PR with whether it is outdated on the current head."""
        head = await self.head_sha(repo, pr)
        threads = [self.state.threads[t] for t in pr.thread_ids]
        return [(t, await self.is_outdated(repo, t, head)) for t in threads]
