"""Issue-side endpoints of a PR: conversation comments, their reactions, labels."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from starlette.routing import Route

from ..errors import Unprocessable
from ..gateway import ApiRequest, Gateway, Reply
from ..shapes import RenderContext
from ..shapes.comments import issue_comment
from ..shapes.pulls import label
from ..shapes.reactions import reaction
from ..state import IssueComment, PullRequest, Reaction, Repo, State
from .listing import since_sorted


class Reactions(Protocol):
    """What reacting to a comment (an issue or a review comment) uses of the model."""

    ctx: RenderContext

    async def react(self, repo_name: str, kind: str, comment_id: int, content: str, *,
                    user: str) -> tuple[Reaction, bool]: ...

    def record(self, kind: str, actor: str, **fields: Any) -> None: ...


class IssuesModel(Reactions, Protocol):
    """What the conversation-comment and label endpoints use of the model (the Simulator is
    one)."""

    state: State

    def repo(self, full_name: str) -> Repo: ...

    def pr(self, full_name: str, number: int) -> tuple[Repo, PullRequest]: ...

    async def comment(self, repo_name: str, number: int, body: str, *,
                      user: str) -> IssueComment: ...

    async def edit_comment(self, repo_name: str, comment_id: int, body: str, *,
                           user: str | None = None) -> IssueComment: ...

    async def delete_comment(self, repo_name: str, comment_id: int, *,
                             user: str | None = None) -> None: ...

    async def add_labels(self, repo_name: str, number: int, labels: Iterable[str], *,
                         actor: str) -> list[str]: ...

    async def remove_label(self, repo_name: str, number: int, name: str, *,
                           actor: str) -> None: ...


async def list_comments(sim: IssuesModel, req: ApiRequest) -> Reply:
    repo, pr = sim.pr(req.repo, req.number())
    page, headers = req.page([sim.state.issue_comments[i] for i in pr.issue_comment_ids])
    return Reply([issue_comment(sim.ctx, repo, c) for c in page], headers=headers)


async def list_repo_comments(sim: IssuesModel, req: ApiRequest) -> Reply:
    """GET .../issues/comments: every PR's conversation comments, with `since`/`sort`."""
    repo = sim.repo(req.repo)
    mine = [c for c in sim.state.issue_comments.values() if c.repo == repo.full_name]
    chosen = since_sorted(req, mine, created=lambda c: c.created_at,
                          updated=lambda c: c.updated_at, ident=lambda c: c.id)
    page, headers = req.page(chosen)
    return Reply([issue_comment(sim.ctx, repo, c) for c in page], headers=headers)


async def _body(req: ApiRequest) -> str:
    body = (await req.json()).get("body")
    if not isinstance(body, str) or not body:
        raise Unprocessable("body is required", "body")
    return body


async def create_comment(sim: IssuesModel, req: ApiRequest) -> Reply:
    body = await _body(req)
    c = await sim.comment(req.repo, req.number(), body, user=req.actor)
    sim.record("issue_comment", req.actor, repo=req.repo, number=c.number, id=c.id, body=body)
    return Reply(issue_comment(sim.ctx, sim.repo(req.repo), c), status=201)


async def get_comment(sim: IssuesModel, req: ApiRequest) -> Reply:
    repo = sim.repo(req.repo)
    return Reply(issue_comment(sim.ctx, repo,
                               sim.state.issue_comment(repo, req.number("comment_id"))))


async def edit_comment(sim: IssuesModel, req: ApiRequest) -> Reply:
    body = await _body(req)
    c = await sim.edit_comment(req.repo, req.number("comment_id"), body, user=req.actor)
    sim.record("issue_comment_edited", req.actor, repo=req.repo, number=c.number, id=c.id,
               body=body)
    return Reply(issue_comment(sim.ctx, sim.repo(req.repo), c))


async def delete_comment(sim: IssuesModel, req: ApiRequest) -> Reply:
    await sim.delete_comment(req.repo, req.number("comment_id"), user=req.actor)
    sim.record("issue_comment_deleted", req.actor, repo=req.repo, id=req.number("comment_id"))
    return Reply(None, status=204)


async def react_to(sim: Reactions, req: ApiRequest, kind: str) -> Reply:
    """POST .../{issues|pulls}/comments/{id}/reactions: 201 new, 200 when it existed."""
    content = (await req.json()).get("content", "")
    r, created = await sim.react(req.repo, kind, req.number("comment_id"), content,
                                 user=req.actor)
    if created:
        sim.record("reaction", req.actor, repo=req.repo, subject=f"{kind}_comment",
                   comment_id=req.number("comment_id"), content=content)
    return Reply(reaction(sim.ctx, r), status=201 if created else 200)


async def react(sim: IssuesModel, req: ApiRequest) -> Reply:
    return await react_to(sim, req, "issue")


async def list_reactions(sim: IssuesModel, req: ApiRequest) -> Reply:
    repo = sim.repo(req.repo)
    c = sim.state.issue_comment(repo, req.number("comment_id"))
    wanted = req.query.get("content")
    page, headers = req.page([r for r in c.reactions if wanted in (None, r.content)])
    return Reply([reaction(sim.ctx, r) for r in page], headers=headers)


async def add_labels(sim: IssuesModel, req: ApiRequest) -> Reply:
    data = await req.json()
    names = data.get("labels") or []
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise Unprocessable("labels must be a list of names", "labels")
    labels = await sim.add_labels(req.repo, req.number(), names, actor=req.actor)
    sim.record("label_added", req.actor, repo=req.repo, number=req.number(), labels=names)
    repo = sim.repo(req.repo)
    return Reply([label(sim.ctx, repo, name) for name in labels])


async def remove_label(sim: IssuesModel, req: ApiRequest) -> Reply:
    name = req.params["name"]
    await sim.remove_label(req.repo, req.number(), name, actor=req.actor)
    sim.record("label_removed", req.actor, repo=req.repo, number=req.number(), label=name)
    _, pr = sim.pr(req.repo, req.number())
    return Reply([label(sim.ctx, sim.repo(req.repo), n) for n in pr.labels])


def routes(gw: Gateway[IssuesModel]) -> list[Route]:
    issues = "/repos/{owner}/{repo}/issues"
    return [
        gw.route("GET", issues + "/{number}/comments", list_comments),
        gw.route("GET", issues + "/comments", list_repo_comments),
        gw.route("POST", issues + "/{number}/comments", create_comment),
        gw.route("GET", issues + "/comments/{comment_id}", get_comment),
        gw.route("PATCH", issues + "/comments/{comment_id}", edit_comment),
        gw.route("DELETE", issues + "/comments/{comment_id}", delete_comment),
        gw.route("GET", issues + "/comments/{comment_id}/reactions", list_reactions),
        gw.route("POST", issues + "/comments/{comment_id}/reactions", react),
        gw.route("POST", issues + "/{number}/labels", add_labels),
        gw.route("DELETE", issues + "/{number}/labels/{name}", remove_label),
    ]
