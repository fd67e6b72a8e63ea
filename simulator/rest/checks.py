"""Check run and commit status endpoints."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from starlette.routing import Route

from ..errors import Unprocessable
from ..gateway import ApiRequest, Gateway, Reply
from ..gitstore import GitStore
from ..shapes import RenderContext
from ..shapes.checks import annotation, check_run, combined_status, status
from ..state import CheckRun, CommitStatus, PullRequest, Repo, State


class ChecksModel(Protocol):
    """What the check-run and status endpoints use of the model (the Simulator is one)."""

    state: State
    git: GitStore
    ctx: RenderContext

    def repo(self, full_name: str) -> Repo: ...

    def open_prs_at(self, repo: Repo, sha: str,
                    branches: dict[str, str]) -> list[tuple[PullRequest, str, str]]: ...

    def runs_for(self, repo: Repo, sha: str) -> list[CheckRun]: ...

    def latest_runs(self, repo: Repo, sha: str) -> list[CheckRun]: ...

    def latest_statuses(self, repo: Repo, sha: str) -> list[CommitStatus]: ...

    async def create_check_run(self, repo_name: str, *, head_sha: str, name: str,
                               app: str = "github-actions", **fields: Any) -> CheckRun: ...

    async def update_check_run(self, repo_name: str, run_id: int, **fields: Any) -> CheckRun: ...

    async def set_status(self, repo_name: str, ref: str, state: str, *,
                         context: str = "default", description: str | None = None,
                         target_url: str | None = None,
                         user: str = "github-actions[bot]") -> CommitStatus: ...

    def record(self, kind: str, actor: str, **fields: Any) -> None: ...


def _app_of(actor: str) -> str:
    # A check run belongs to the app whose token created it: `convergebot[bot]` -> `convergebot`.
    return actor.removesuffix("[bot]")


async def _render(sim: ChecksModel, repo: Repo, runs: Sequence[CheckRun]) -> list[dict]:
    branches = await sim.git.heads(repo.git_dir)
    return [check_run(sim.ctx, repo, run, sim.open_prs_at(repo, run.head_sha, branches))
            for run in runs]


async def create_run(sim: ChecksModel, req: ApiRequest) -> Reply:
    body = await req.json()
    if not body.get("name") or not body.get("head_sha"):
        raise Unprocessable("name and head_sha are required", "name")
    fields = {k: body[k] for k in ("status", "conclusion", "output", "details_url",
                                   "external_id", "started_at", "completed_at") if k in body}
    run = await sim.create_check_run(req.repo, head_sha=body["head_sha"], name=body["name"],
                                     app=_app_of(req.actor), **fields)
    sim.record("check_run_created", req.actor, repo=req.repo, id=run.id, name=run.name,
               head_sha=run.head_sha, status=run.status, conclusion=run.conclusion,
               output=run.output)
    return Reply((await _render(sim, sim.repo(req.repo), [run]))[0], status=201)


async def update_run(sim: ChecksModel, req: ApiRequest) -> Reply:
    body = await req.json()
    fields = {k: body[k] for k in ("name", "status", "conclusion", "output", "details_url",
                                   "external_id", "started_at", "completed_at") if k in body}
    run = await sim.update_check_run(req.repo, req.number("check_run_id"), **fields)
    sim.record("check_run_updated", req.actor, repo=req.repo, id=run.id, name=run.name,
               head_sha=run.head_sha, status=run.status, conclusion=run.conclusion,
               output=run.output)
    return Reply((await _render(sim, sim.repo(req.repo), [run]))[0])


async def get_run(sim: ChecksModel, req: ApiRequest) -> Reply:
    repo = sim.repo(req.repo)
    run = sim.state.check_run(repo, req.number("check_run_id"))
    return Reply((await _render(sim, repo, [run]))[0])


async def run_annotations(sim: ChecksModel, req: ApiRequest) -> Reply:
    repo = sim.repo(req.repo)
    run = sim.state.check_run(repo, req.number("check_run_id"))
    page, headers = req.page(run.annotations)
    return Reply([annotation(sim.ctx, repo, run, a) for a in page], headers=headers)


async def _sha(sim: ChecksModel, repo: Repo, ref: str) -> str:
    sha = await sim.git.resolve(repo.git_dir, ref)
    if sha is None:
        raise Unprocessable(f"No commit found for SHA: {ref}", "ref")
    return sha


async def runs_for_ref(sim: ChecksModel, req: ApiRequest) -> Reply:
    """Newest run per name unless `filter=all`; `check_name` and `status` narrow it further."""
    repo = sim.repo(req.repo)
    sha = await _sha(sim, repo, req.params["ref"])
    if req.query.get("filter", "latest") == "latest":
        runs = sim.latest_runs(repo, sha)
    else:
        runs = sorted(sim.runs_for(repo, sha), key=lambda r: r.id, reverse=True)
    if req.query.get("check_name"):
        runs = [r for r in runs if r.name == req.query["check_name"]]
    if req.query.get("status"):
        runs = [r for r in runs if r.status == req.query["status"]]
    page, headers = req.page(runs)
    return Reply({"total_count": len(runs), "check_runs": await _render(sim, repo, page)},
                 headers=headers)


async def combined(sim: ChecksModel, req: ApiRequest) -> Reply:
    repo = sim.repo(req.repo)
    sha = await _sha(sim, repo, req.params["ref"])
    return Reply(combined_status(sim.ctx, repo, sha, sim.latest_statuses(repo, sha)))


async def list_statuses(sim: ChecksModel, req: ApiRequest) -> Reply:
    repo = sim.repo(req.repo)
    sha = await _sha(sim, repo, req.params["ref"])
    found = [s for s in reversed(sim.state.statuses) if s.repo == repo.full_name and s.sha == sha]
    page, headers = req.page(found)
    return Reply([status(sim.ctx, repo, s) for s in page], headers=headers)


async def create_status(sim: ChecksModel, req: ApiRequest) -> Reply:
    body = await req.json()
    if "state" not in body:
        raise Unprocessable("state is required", "state")
    s = await sim.set_status(req.repo, req.params["sha"], body["state"],
                             context=body.get("context") or "default",
                             description=body.get("description"),
                             target_url=body.get("target_url"), user=req.actor)
    sim.record("status_created", req.actor, repo=req.repo, sha=s.sha, state=s.state,
               context=s.context)
    return Reply(status(sim.ctx, sim.repo(req.repo), s), status=201)


def routes(gw: Gateway[ChecksModel]) -> list[Route]:
    repo = "/repos/{owner}/{repo}"
    return [
        gw.route("POST", repo + "/check-runs", create_run),
        gw.route("GET", repo + "/check-runs/{check_run_id}", get_run),
        gw.route("PATCH", repo + "/check-runs/{check_run_id}", update_run),
        gw.route("GET", repo + "/check-runs/{check_run_id}/annotations", run_annotations),
        gw.route("GET", repo + "/commits/{ref}/check-runs", runs_for_ref),
        gw.route("GET", repo + "/commits/{ref}/status", combined),
        gw.route("GET", repo + "/commits/{ref}/statuses", list_statuses),
        gw.route("POST", repo + "/statuses/{sha}", create_status),
    ]
