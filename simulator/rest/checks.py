"""Check run and commit status endpoints."""

from __future__ import annotations

from ..errors import Unprocessable
from ..gateway import ApiRequest, Gateway, Reply
from ..shapes.checks import annotation, check_run, combined_status, status


def _app_of(actor: str) -> str:
    # A check run belongs to the app whose token created it: `convergebot[bot]` -> `convergebot`.
    return actor.removesuffix("[bot]")


async def _render(sim, repo, runs) -> list[dict]:
    branches = await sim.git.heads(repo.git_dir)
    return [check_run(sim.ctx, repo, run, sim.open_prs_at(repo, run.head_sha, branches))
            for run in runs]


async def create_run(sim, req: ApiRequest) -> Reply:
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


async def update_run(sim, req: ApiRequest) -> Reply:
    body = await req.json()
    fields = {k: body[k] for k in ("name", "status", "conclusion", "output", "details_url",
                                   "external_id", "started_at", "completed_at") if k in body}
    run = await sim.update_check_run(req.repo, req.number("check_run_id"), **fields)
    sim.record("check_run_updated", req.actor, repo=req.repo, id=run.id, name=run.name,
               head_sha=run.head_sha, status=run.status, conclusion=run.conclusion,
               output=run.output)
    return Reply((await _render(sim, sim.repo(req.repo), [run]))[0])


async def get_run(sim, req: ApiRequest) -> Reply:
    repo = sim.repo(req.repo)
    run = sim.state.check_run(repo, req.number("check_run_id"))
    return Reply((await _render(sim, repo, [run]))[0])


async def run_annotations(sim, req: ApiRequest) -> Reply:
    repo = sim.repo(req.repo)
    run = sim.state.check_run(repo, req.number("check_run_id"))
    page, headers = req.page(run.annotations)
    return Reply([annotation(sim.ctx, repo, run, a) for a in page], headers=headers)


async def _sha(sim, repo, ref: str) -> str:
    sha = await sim.git.resolve(repo.git_dir, ref)
    if sha is None:
        raise Unprocessable(f"No commit found for SHA: {ref}", "ref")
    return sha


async def runs_for_ref(sim, req: ApiRequest) -> Reply:
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


async def combined(sim, req: ApiRequest) -> Reply:
    repo = sim.repo(req.repo)
    sha = await _sha(sim, repo, req.params["ref"])
    return Reply(combined_status(sim.ctx, repo, sha, sim.latest_statuses(repo, sha)))


async def list_statuses(sim, req: ApiRequest) -> Reply:
    repo = sim.repo(req.repo)
    sha = await _sha(sim, repo, req.params["ref"])
    found = [s for s in reversed(sim.state.statuses) if s.repo == repo.full_name and s.sha == sha]
    page, headers = req.page(found)
    return Reply([status(sim.ctx, repo, s) for s in page], headers=headers)


async def create_status(sim, req: ApiRequest) -> Reply:
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


def routes(gw: Gateway):
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
