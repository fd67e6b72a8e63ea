"""Issue comments (the conversation tab) and reactions on any comment."""

from __future__ import annotations

from ..core import SimulatorCore
from ..errors import Unprocessable
from ..ids import now
from ..shapes.comments import issue_comment as render_comment
from ..shapes.pulls import issue_of
from ..state import REACTIONS, IssueComment, Reaction


class CommentOps(SimulatorCore):
    async def comment(self, repo_name: str, number: int, body: str, *,
                      user: str) -> IssueComment:
        """Post an issue comment on PR `number` as `user`; sends issue_comment `created`."""
        if not body:
            raise Unprocessable("body cannot be blank", "body")
        repo, pr = self.pr(repo_name, number)
        async with self.lock:
            stamp = now()
            c = IssueComment(id=self.state.new_id(), repo=repo.full_name, number=pr.number,
                             user=user, body=body, created_at=stamp, updated_at=stamp)
            self.state.issue_comments[c.id] = c
            pr.issue_comment_ids.append(c.id)
            self._emit_comment("created", c, user)
            self.reviewer.commented(repo, pr, body)
        return c

    async def edit_comment(self, repo_name: str, comment_id: int, body: str, *,
                           user: str | None = None) -> IssueComment:
        repo = self.repo(repo_name)
        c = self.state.issue_comment(repo, comment_id)
        async with self.lock:
            old, c.body, c.updated_at = c.body, body, now()
            self._emit_comment("edited", c, user or c.user, changes={"body": {"from": old}})
        return c

    async def delete_comment(self, repo_name: str, comment_id: int, *,
                             user: str | None = None) -> None:
        repo = self.repo(repo_name)
        c = self.state.issue_comment(repo, comment_id)
        async with self.lock:
            del self.state.issue_comments[c.id]
            self.state.pr(repo, c.number).issue_comment_ids.remove(c.id)
            self._emit_comment("deleted", c, user or c.user)

    def _emit_comment(self, action: str, c: IssueComment, sender: str, **extra) -> None:
        repo = self.repo(c.repo)
        pr = self.state.pr(repo, c.number)
        self.emit("issue_comment", repo, sender, action, issue=issue_of(self.ctx, repo, pr),
                  comment=render_comment(self.ctx, repo, c), **extra)

    async def react(self, repo_name: str, kind: str, comment_id: int, content: str, *,
                    user: str) -> tuple[Reaction, bool]:
        """React to an issue (`kind="issue"`) or review (`"review"`) comment.

        Returns (reaction, created): the same user reacting with the same content again gets
        the existing reaction back, which the REST layer answers with 200 instead of 201.
        """
        if content not in REACTIONS:
            raise Unprocessable(f"content must be one of {', '.join(REACTIONS)}", "content")
        repo = self.repo(repo_name)
        target = (self.state.issue_comment(repo, comment_id) if kind == "issue"
                  else self.state.review_comment(repo, comment_id))
        async with self.lock:
            for existing in target.reactions:
                if existing.user == user and existing.content == content:
                    return existing, False
            reaction = Reaction(id=self.state.new_id(), user=user, content=content,
                                created_at=now())
            target.reactions.append(reaction)
        return reaction, True
