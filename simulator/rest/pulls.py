"""Pull request endpoints: list, get, edit, merge, update-branch, review requests."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from starlette.routing import Route

from ..errors import NotFound, Unprocessable
from ..gateway import ApiRequest, Gateway, Reply
from ..gitstore import GitStore
from ..shapes import RenderContext
from ..shapes.users import user
from ..state import PullRequest, Repo, State

_STATES = ("open", "closed", "all")
_SORTS = ("created", "updated")  # GitHub also has popularity and long-running


class PullsModel(Protocol):
    """What the pull request endpoints use of the model (the Simulator is one)."""

    state: State
    git: GitStore  # a page's branch heads, read once
    ctx: RenderContext

    def repo(self, full_name: str) -> Repo: ...

    def pr(self, full_name: str, number: int) -> tuple[Repo, PullRequest]: ...

    def head_repo(self, repo: Repo, pr: PullRequest) -> Repo: ...

    async def pr_json(self, repo: Repo, pr: PullRequest, *, full: bool = True,
                      branches: dict[str, str] | None = None, read: bool = False) -> dict: ...

    async def edit_pr(self, repo_name: str, number: int, *, actor: str, title: str | None = None,
                      body: str | None = None, state: str | None = None,
                      base: str | None = None) -> PullRequest: ...

    async def merge_pr(self, repo_name: str, number: int, *, method: str = "merge",
                       sha: str | None = None, actor: str | None = None,
                       commit_title: str | None = None,
                       commit_message: str | None = None) -> dict: ...

    async def update_branch(self, repo_name: str, number: int, *,
                            expected_head_sha: str | None = None,
                            actor: str | None = None) -> str: ...

    async def request_reviewers(self, repo_name: str, number: int, reviewers: Iterable[str], *,
                                actor: str) -> PullRequest: ...

    async def remove_requested_reviewers(self, repo_name: str, number: int,
                                         reviewers: Iterable[str], *,
                                         actor: str) -> PullRequest: ...

    async def request_copilot_review(self, repo_name: str, number: int, *,
                                     actor: str) -> None: ...

    def record(self, kind: str, actor: str, **fields: Any) -> None: ...


async def list_pulls(sim: PullsModel, req: ApiRequest) -> Reply:
    repo = sim.repo(req.repo)
    state = req.query.get("state", "open")
    if state not in _STATES:
        raise Unprocessable("state must be open, closed or all", "state")
    head, base = req.query.get("head"), req.query.get("base")
    prs = [pr for pr in sim.state.prs_of(repo)
           if (state == "all" or pr.state == state)
           and (head is None or head in (pr.head_ref, f"{sim.head_repo(repo, pr).owner}:{pr.head_ref}"))
           and (base is None or pr.base_ref == base)]
    sort = req.query.get("sort", "created")
    if sort not in _SORTS:
        raise Unprocessable(f"sort must be one of {', '.join(_SORTS)}", "sort")
    # GitHub's default direction: desc for `created`, asc for the others.
    direction = req.query.get("direction", "desc" if sort == "created" else "asc")
    if direction not in ("asc", "desc"):
        raise Unprocessable("direction must be asc or desc", "direction")
    by = (lambda pr: pr.number) if sort == "created" else (lambda pr: (pr.updated_at, pr.number))
    prs.sort(key=by, reverse=direction == "desc")
    page, headers = req.page(prs)
    branches = await sim.git.heads(repo.git_dir)  # one git call for the whole page
    return Reply([await sim.pr_json(repo, pr, full=False, branches=branches, read=True)
                  for pr in page], headers=headers)


async def get_pull(sim: PullsModel, req: ApiRequest) -> Reply:
    repo, pr = sim.pr(req.repo, req.number())
    return Reply(await sim.pr_json(repo, pr, read=True))  # a PR-object read: lags show


async def edit_pull(sim: PullsModel, req: ApiRequest) -> Reply:
    body = await req.json()
    pr = await sim.edit_pr(req.repo, req.number(), actor=req.actor, title=body.get("title"),
                           body=body.get("body"), state=body.get("state"), base=body.get("base"))
    sim.record("pr_edited", req.actor, repo=req.repo, number=pr.number,
               fields=sorted(k for k in body if k in ("title", "body", "state", "base")))
    return Reply(await sim.pr_json(sim.repo(req.repo), pr))


async def merge_pull(sim: PullsModel, req: ApiRequest) -> Reply:
    body = await req.json()
    result = await sim.merge_pr(req.repo, req.number(), method=body.get("merge_method", "merge"),
                                sha=body.get("sha"), actor=req.actor,
                                commit_title=body.get("commit_title"),
                                commit_message=body.get("commit_message"))
    sim.record("merge", req.actor, repo=req.repo, number=req.number(), sha=result["sha"],
               method=body.get("merge_method", "merge"), expected_head=body.get("sha"))
    return Reply(result)


async def is_merged(sim: PullsModel, req: ApiRequest) -> Reply:
    _, pr = sim.pr(req.repo, req.number())
    if not pr.merged:
        raise NotFound("merge")
    return Reply(None, status=204)


async def update_branch(sim: PullsModel, req: ApiRequest) -> Reply:
    body = await req.json()
    new = await sim.update_branch(req.repo, req.number(), actor=req.actor,
                                  expected_head_sha=body.get("expected_head_sha"))
    sim.record("branch_update", req.actor, repo=req.repo, number=req.number(), head=new,
               expected_head=body.get("expected_head_sha"))
    pull = sim.ctx.api(f"repos/{req.repo}/pulls/{req.number()}")
    return Reply({"message": "Updating pull request branch.", "url": pull}, status=202)


async def get_requested(sim: PullsModel, req: ApiRequest) -> Reply:
    _, pr = sim.pr(req.repo, req.number())
    return Reply({"users": [user(sim.ctx, login) for login in pr.requested_reviewers],
                  "teams": []})


async def request_reviewers(sim: PullsModel, req: ApiRequest) -> Reply:
    body = await req.json()
    reviewers = body.get("reviewers") or []
    if not isinstance(reviewers, list) or not reviewers and not body.get("team_reviewers"):
        raise Unprocessable("reviewers must be a non-empty list", "reviewers")
    pr = await sim.request_reviewers(req.repo, req.number(), reviewers, actor=req.actor)
    sim.record("review_requested", req.actor, repo=req.repo, number=pr.number,
               reviewers=reviewers)
    return Reply(await sim.pr_json(sim.repo(req.repo), pr, full=False), status=201)


async def remove_reviewers(sim: PullsModel, req: ApiRequest) -> Reply:
    body = await req.json()
    reviewers = body.get("reviewers") or []
    pr = await sim.remove_requested_reviewers(req.repo, req.number(), reviewers, actor=req.actor)
    sim.record("review_request_removed", req.actor, repo=req.repo, number=pr.number,
               reviewers=reviewers)
    return Reply(await sim.pr_json(sim.repo(req.repo), pr, full=False))


async def copilot_review(sim: PullsModel, req: ApiRequest) -> Reply:
    await sim.request_copilot_review(req.repo, req.number(), actor=req.actor)
    sim.record("copilot_review_requested", req.actor, repo=req.repo, number=req.number())
    return Reply({"message": "Copilot code review requested."}, status=202)


def routes(gw: Gateway[PullsModel]) -> list[Route]:
    base = "/repos/{owner}/{repo}/pulls"
    return [
        gw.route("GET", base, list_pulls),
        gw.route("GET", base + "/{number}", get_pull),
        gw.route("PATCH", base + "/{number}", edit_pull),
        gw.route("PUT", base + "/{number}/merge", merge_pull),
        gw.route("GET", base + "/{number}/merge", is_merged),
        gw.route("PUT", base + "/{number}/update-branch", update_branch),
        gw.route("GET", base + "/{number}/requested_reviewers", get_requested),
        gw.route("POST", base + "/{number}/requested_reviewers", request_reviewers),
        gw.route("DELETE", base + "/{number}/requested_reviewers", remove_reviewers),
        gw.route("POST", base + "/{number}/copilot-code-review", copilot_review),
    ]
