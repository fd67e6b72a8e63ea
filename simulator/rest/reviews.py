"""Reviews and review (diff) comment endpoints, including thread replies and reactions."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from starlette.routing import Route

from ..errors import NotFound, Unprocessable
from ..gateway import ApiRequest, Gateway, Reply
from ..shapes.reviews import review, review_comment
from ..state import PullRequest, Repo, Review, ReviewComment, ReviewThread, State, ThreadSpec
from .issues import Reactions, react_to
from .listing import since_sorted


class ReviewsModel(Reactions, Protocol):
    """What the review and review-comment endpoints use of the model (the Simulator is one)."""

    state: State

    def repo(self, full_name: str) -> Repo: ...

    def pr(self, full_name: str, number: int) -> tuple[Repo, PullRequest]: ...

    async def head_sha(self, repo: Repo, pr: PullRequest) -> str: ...

    async def is_outdated(self, repo: Repo, thread: ReviewThread, head: str) -> bool: ...

    async def submit_review(self, repo_name: str, number: int, *, user: str, body: str = "",
                            state: str = "COMMENTED",
                            threads: Iterable[ThreadSpec | dict] = (),
                            commit_id: str | None = None) -> Review: ...

    async def reply(self, repo_name: str, number: int, comment_id: int, *, body: str,
                    user: str) -> ReviewComment: ...


async def list_reviews(sim: ReviewsModel, req: ApiRequest) -> Reply:
    repo, pr = sim.pr(req.repo, req.number())
    page, headers = req.page([sim.state.reviews[i] for i in pr.review_ids])
    return Reply([review(sim.ctx, repo, r) for r in page], headers=headers)


async def get_review(sim: ReviewsModel, req: ApiRequest) -> Reply:
    repo, pr = sim.pr(req.repo, req.number())
    review_id = req.number("review_id")
    if review_id not in pr.review_ids:
        raise NotFound("review")
    return Reply(review(sim.ctx, repo, sim.state.reviews[review_id]))


async def create_review(sim: ReviewsModel, req: ApiRequest) -> Reply:
    """POST .../reviews with `event` and inline `comments` ({path, line, body})."""
    body = await req.json()
    try:
        threads = [ThreadSpec(path=c["path"], line=int(c["line"]), body=c["body"])
                   for c in body.get("comments") or []]
    except (KeyError, TypeError, ValueError):
        raise Unprocessable("each comment needs path, line and body", "comments") from None
    r = await sim.submit_review(req.repo, req.number(), user=req.actor,
                                body=body.get("body") or "", state=body.get("event") or "COMMENT",
                                threads=threads, commit_id=body.get("commit_id"))
    sim.record("review", req.actor, repo=req.repo, number=req.number(), id=r.id, state=r.state,
               body=r.body, threads=len(threads))
    return Reply(review(sim.ctx, sim.repo(req.repo), r))


async def _render_comments(sim: ReviewsModel, repo: Repo, pr: PullRequest,
                           comment_ids: list[int]) -> list[dict]:
    head = await sim.head_sha(repo, pr)
    out = []
    for cid in comment_ids:
        c = sim.state.review_comments[cid]
        outdated = await sim.is_outdated(repo, sim.state.threads[c.thread_id], head)
        out.append(review_comment(sim.ctx, repo, c, head=head, outdated=outdated))
    return out


async def list_comments(sim: ReviewsModel, req: ApiRequest) -> Reply:
    repo, pr = sim.pr(req.repo, req.number())
    page, headers = req.page(pr.review_comment_ids)
    return Reply(await _render_comments(sim, repo, pr, page), headers=headers)


async def list_repo_comments(sim: ReviewsModel, req: ApiRequest) -> Reply:
    """GET .../pulls/comments: every PR's review comments, with `since`/`sort`."""
    repo = sim.repo(req.repo)
    mine = [c for c in sim.state.review_comments.values() if c.repo == repo.full_name]
    chosen = since_sorted(req, mine, created=lambda c: c.created_at,
                          updated=lambda c: c.updated_at, ident=lambda c: c.id)
    page, headers = req.page(chosen)
    out = []
    for c in page:
        out += await _render_comments(sim, repo, sim.state.pr(repo, c.number), [c.id])
    return Reply(out, headers=headers)


async def get_comment(sim: ReviewsModel, req: ApiRequest) -> Reply:
    repo = sim.repo(req.repo)
    c = sim.state.review_comment(repo, req.number("comment_id"))
    pr = sim.state.pr(repo, c.number)
    return Reply((await _render_comments(sim, repo, pr, [c.id]))[0])


async def reply(sim: ReviewsModel, req: ApiRequest) -> Reply:
    body = (await req.json()).get("body")
    if not body:
        raise Unprocessable("body is required", "body")
    c = await sim.reply(req.repo, req.number(), req.number("comment_id"), body=body,
                        user=req.actor)
    sim.record("review_reply", req.actor, repo=req.repo, number=req.number(), id=c.id,
               in_reply_to=c.in_reply_to_id, body=body)
    repo, pr = sim.pr(req.repo, req.number())
    return Reply((await _render_comments(sim, repo, pr, [c.id]))[0], status=201)


async def react(sim: ReviewsModel, req: ApiRequest) -> Reply:
    return await react_to(sim, req, "review")


def routes(gw: Gateway[ReviewsModel]) -> list[Route]:
    pulls = "/repos/{owner}/{repo}/pulls"
    return [
        gw.route("GET", pulls + "/{number}/reviews", list_reviews),
        gw.route("POST", pulls + "/{number}/reviews", create_review),
        gw.route("GET", pulls + "/{number}/reviews/{review_id}", get_review),
        gw.route("GET", pulls + "/{number}/comments", list_comments),
        gw.route("POST", pulls + "/{number}/comments/{comment_id}/replies", reply),
        gw.route("GET", pulls + "/comments", list_repo_comments),
        gw.route("GET", pulls + "/comments/{comment_id}", get_comment),
        gw.route("POST", pulls + "/comments/{comment_id}/reactions", react),
    ]
