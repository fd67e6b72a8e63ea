"""The control API under /_sim/: drive the fake GitHub out of band and inspect what happened.

Never counted, rate limited or faulted: tests must be able to set up and observe even while
the GitHub API is failing on purpose.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .control_model import (
    ControlModel,
    FaultControl,
    Observation,
    PullControl,
    RepoControl,
    ReviewControl,
)
from .errors import ApiError
from .scenario import ScenarioError, parse_reviewer
from .shapes.comments import issue_comment
from .shapes.reviews import review
from .webhooks import WebhookFaults

# A control handler: the model (each handler takes the narrowest part), the request, its JSON body.
Control = Callable[[ControlModel, Request, dict], Awaitable[Any]]


def _respond(data: Any, status: int = 200) -> Response:
    return Response(json.dumps(data), status, media_type="application/json")


def _wrap(sim: ControlModel, handler: Control, status: int) -> Callable:
    async def endpoint(request: Request) -> Response:
        raw = await request.body()
        try:
            body = json.loads(raw) if raw.strip() else {}
        except ValueError as e:
            return _respond({"message": f"body is not JSON: {e}"}, 400)
        if not isinstance(body, dict):
            return _respond({"message": "body must be a JSON object"}, 400)
        try:
            return _respond(await handler(sim, request, body), status)
        except ApiError as e:
            return _respond(e.body(), e.status)
        except KeyError as e:
            return _respond({"message": f"missing field {e}"}, 422)
        except (ScenarioError, TypeError, ValueError) as e:
            return _respond({"message": f"bad control request: {e}"}, 422)

    return endpoint


def _repo(request: Request) -> str:
    return f"{request.path_params['owner']}/{request.path_params['repo']}"


def _number(request: Request) -> int:
    return int(request.path_params["number"])


# -- handlers ------------------------------------------------------------------------------


async def create_repo(sim: RepoControl, request: Request, body: dict) -> dict:
    repo = await sim.create_repo(body["name"], default_branch=body.get("default_branch", "main"),
                                 files=body.get("files"), collaborators=body.get("collaborators"),
                                 description=body.get("description"))
    return {"full_name": repo.full_name, "clone_url": repo.git_dir.as_uri()}


async def fork_repo(sim: RepoControl, request: Request, body: dict) -> dict:
    repo = await sim.fork_repo(_repo(request), body["owner"])
    return {"full_name": repo.full_name, "clone_url": repo.git_dir.as_uri(), "fork_of": repo.fork_of}


async def set_permission(sim: RepoControl, request: Request, body: dict) -> dict:
    await sim.set_permission(_repo(request), request.path_params["user"], body.get("permission"))
    return {"login": request.path_params["user"], "permission": body.get("permission")}


async def push(sim: RepoControl, request: Request, body: dict) -> dict:
    sha = await sim.push(_repo(request), body["branch"], body.get("files") or {},
                         message=body.get("message", "Update files"), author=body.get("author"),
                         start=body.get("start"))
    return {"sha": sha}


async def open_pr(sim: PullControl, request: Request, body: dict) -> dict:
    scripts = [parse_reviewer(r, f"reviewers[{i}]") for i, r in enumerate(body.get("reviewers", []))]
    pr = await sim.open_pr(_repo(request), title=body["title"], head=body["head"],
                           base=body.get("base"), files=body.get("files"),
                           body=body.get("body", ""), author=body.get("author", "octocat"),
                           labels=body.get("labels", ()), draft=body.get("draft", False),
                           reviewers=scripts, head_repo=body.get("head_repo"),
                           maintainer_can_modify=bool(body.get("maintainer_can_modify", False)))
    repo = sim.repo(_repo(request))
    return await sim.pr_json(repo, pr)


async def submit_review(sim: ReviewControl, request: Request, body: dict) -> dict:
    r = await sim.submit_review(_repo(request), _number(request), user=body["user"],
                                body=body.get("body", ""), state=body.get("state", "COMMENTED"),
                                threads=body.get("threads", []), commit_id=body.get("commit_id"))
    return review(sim.ctx, sim.repo(_repo(request)), r)


async def comment(sim: ReviewControl, request: Request, body: dict) -> dict:
    c = await sim.comment(_repo(request), _number(request), body["body"], user=body["user"])
    return issue_comment(sim.ctx, sim.repo(_repo(request)), c)


async def edit_comment(sim: ReviewControl, request: Request, body: dict) -> dict:
    c = await sim.edit_comment(_repo(request), int(request.path_params["id"]), body["body"],
                               user=body.get("user"))
    return issue_comment(sim.ctx, sim.repo(_repo(request)), c)


async def delete_comment(sim: ReviewControl, request: Request, body: dict) -> dict:
    await sim.delete_comment(_repo(request), int(request.path_params["id"]),
                             user=body.get("user") or request.query_params.get("user"))
    return {"deleted": int(request.path_params["id"])}


async def reply(sim: ReviewControl, request: Request, body: dict) -> dict:
    c = await sim.reply(_repo(request), _number(request), int(body["comment_id"]),
                        body=body["body"], user=body["user"])
    return {"id": c.id, "in_reply_to_id": c.in_reply_to_id}


async def resolve_thread(sim: ReviewControl, request: Request, body: dict) -> dict:
    thread = await sim.resolve_thread(request.path_params["node_id"], user=body["user"],
                                      resolved=body.get("resolved", True))
    return {"id": thread.node_id, "isResolved": thread.is_resolved}


async def close_pr(sim: PullControl, request: Request, body: dict) -> dict:
    await sim.close_pr(_repo(request), _number(request), actor=body.get("user"))
    return {"state": "closed"}


async def reopen_pr(sim: PullControl, request: Request, body: dict) -> dict:
    await sim.reopen_pr(_repo(request), _number(request), actor=body.get("user"))
    return {"state": "open"}


async def merge_pr(sim: PullControl, request: Request, body: dict) -> dict:
    return await sim.merge_pr(_repo(request), _number(request),
                              method=body.get("method", "merge"), sha=body.get("sha"),
                              actor=body.get("user"), commit_title=body.get("commit_title"))


async def add_labels(sim: PullControl, request: Request, body: dict) -> dict:
    labels = await sim.add_labels(_repo(request), _number(request), body["labels"],
                                  actor=body.get("user", "octocat"))
    return {"labels": labels}


async def set_mergeable(sim: PullControl, request: Request, body: dict) -> dict:
    await sim.set_mergeable(_repo(request), _number(request), body.get("mergeable_state"))
    return {"mergeable_state": body.get("mergeable_state")}


async def repo_settings(sim: RepoControl, request: Request, body: dict) -> dict:
    """PATCH `{"require_up_to_date": bool, "required_checks": [names]}` (either or both):
    branch protection's up-to-date rule and required status checks."""
    out: dict[str, Any] = {}
    if "required_checks" in body:
        names = body["required_checks"]
        if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
            raise ApiError(422, "required_checks must be a list of check names")
        out["required_checks"] = names
    if "require_up_to_date" in body or not out:
        on = body.get("require_up_to_date")
        if not isinstance(on, bool):
            raise ApiError(422, "require_up_to_date must be true or false")
        out["require_up_to_date"] = on
    if "required_checks" in out:
        sim.set_required_checks(_repo(request), out["required_checks"])
    if "require_up_to_date" in out:
        await sim.require_up_to_date(_repo(request), out["require_up_to_date"])
    return out


async def merge_queue(sim: RepoControl, request: Request, body: dict) -> dict:
    """PUT `{"branch": b, "checks": [names], "required": bool}`: `b` (the default branch when
    absent) takes changes only through a merge queue whose groups must pass `checks`;
    `"required": false` turns the queue off."""
    checks, required = body.get("checks") or [], body.get("required", True)
    if not isinstance(checks, list) or not all(isinstance(c, str) for c in checks):
        raise ApiError(422, "checks must be a list of check names")
    if not isinstance(required, bool):
        raise ApiError(422, "required must be true or false")
    queue = await sim.require_merge_queue(_repo(request), body.get("branch"), checks=checks,
                                          required=required)
    if queue is None:
        return {"required": False}
    return {"required": True, "branch": queue.branch, "checks": queue.required_checks,
            "entries": [{"number": e.number, "head_sha": e.head_sha, "group_sha": e.group_sha,
                         "ref": e.ref} for e in queue.entries]}


async def head_lag(sim: PullControl, request: Request, body: dict) -> dict | None:
    """PUT `{"reads": N | null}` freezes the PR object's head; DELETE releases; GET shows it."""
    repo, number = _repo(request), _number(request)
    if request.method == "PUT":
        return (await sim.lag_pr_head(repo, number, reads=body.get("reads"))).to_dict()
    if request.method == "DELETE":
        return {"released": sim.release_pr_head(repo, number)}
    lag = sim.head_lag(repo, number)
    return lag.to_dict() if lag else None


async def request_review(sim: PullControl, request: Request, body: dict) -> dict:
    pr = await sim.request_reviewers(_repo(request), _number(request), body["reviewers"],
                                     actor=body.get("user", "octocat"))
    return {"requested_reviewers": pr.requested_reviewers}


async def set_reviewer(sim: PullControl, request: Request, body: dict) -> dict:
    number = body.pop("number", None)
    script = parse_reviewer(body, "reviewer")
    sim.set_reviewer(_repo(request), script, number)
    return {"login": script.login, "steps": len(script.steps), "number": number}


async def set_check_run(sim: RepoControl, request: Request, body: dict) -> dict:
    run = await sim.set_check_run(_repo(request), body.get("sha") or body["ref"], body["name"],
                                  status=body.get("status", "completed"),
                                  conclusion=body.get("conclusion", "success"),
                                  app=body.get("app", "github-actions"),
                                  output=body.get("output"))
    return {"id": run.id, "head_sha": run.head_sha, "status": run.status,
            "conclusion": run.conclusion}


async def set_status(sim: RepoControl, request: Request, body: dict) -> dict:
    s = await sim.set_status(_repo(request), body.get("sha") or body["ref"], body["state"],
                             context=body.get("context", "default"),
                             description=body.get("description"),
                             target_url=body.get("target_url"),
                             user=body.get("user", "github-actions[bot]"))
    return {"id": s.id, "sha": s.sha, "state": s.state, "context": s.context}


async def webhooks(sim: FaultControl, request: Request, body: dict) -> dict:
    if request.method == "PUT":
        senders = body.get("senders")
        if senders is not None and (not isinstance(senders, int) or isinstance(senders, bool)):
            raise ValueError("senders must be an integer")  # its bound: WebhookDispatcher.configure
        sim.configure_webhooks(body.get("url"), body.get("secret"), senders=senders)
    return {"url": sim.webhooks.url, "secret_set": bool(sim.webhooks.secret), "senders": sim.webhooks.senders}


async def webhook_faults(sim: FaultControl, request: Request, body: dict) -> dict:
    if request.method == "PUT":
        sim.webhooks.faults = WebhookFaults()
        sim.webhook_faults(**body)
    return sim.webhooks.faults.to_dict()


async def deliveries(sim: Observation, request: Request, body: dict) -> list[dict]:
    q = request.query_params
    found = sim.webhooks.find(q.get("event"), q.get("action"))
    return [d.to_dict(with_payload=q.get("payload") in ("1", "true")) for d in found]


async def faults(sim: FaultControl, request: Request, body: dict) -> dict | list[dict]:
    if request.method == "POST":
        return sim.inject_fault(body.pop("path"), **body).to_dict()
    if request.method == "DELETE":
        fault_id = request.query_params.get("id")
        sim.clear_faults(int(fault_id) if fault_id else None)
    return [f.to_dict() for f in sim.faults.rules]


async def chaos(sim: FaultControl, request: Request, body: dict) -> dict:
    """PUT starts a seeded run with the JSON fields of `Simulator.chaos`; DELETE stops it."""
    if request.method == "PUT":
        sim.chaos(body.pop("seed"), **body)
    elif request.method == "DELETE":
        sim.chaos_off()
    return sim.request_chaos.to_dict()


async def webhook_chaos(sim: FaultControl, request: Request, body: dict) -> dict:
    if request.method == "PUT":
        sim.webhook_chaos(body.pop("seed"), **body)
    elif request.method == "DELETE":
        sim.webhook_chaos_off()
    return sim.webhooks.chaos.to_dict()


async def ref_updates(sim: Observation, request: Request, body: dict) -> list[dict]:
    forced = request.query_params.get("forced") in ("1", "true")
    return sim.forced_pushes() if forced else sim.ref_updates


async def duplicates(sim: Observation, request: Request, body: dict) -> list[dict]:
    return sim.duplicate_effects()


async def counters(sim: Observation, request: Request, body: dict) -> dict:
    if request.method == "DELETE":
        sim.counters.reset()
    return sim.counters.snapshot()


async def side_effects(sim: Observation, request: Request, body: dict) -> list[dict]:
    if request.method == "DELETE":
        sim.side_effects.clear()
    return sim.effects(request.query_params.get("kind"))


async def post_receive(sim: RepoControl, request: Request, body: dict) -> dict:
    """Called by the post-receive hook that a real `git push` runs in the bare repository."""
    updates = [(u["old"], u["new"], u["ref"]) for u in body.get("updates", [])]
    await sim.refs_pushed(body["repo"], updates, body.get("pusher") or None)
    return {"ok": True}


async def state(sim: Observation, request: Request, body: dict) -> dict:
    return await sim.dump_state()


async def settle(sim: Observation, request: Request, body: dict) -> dict:
    await sim.settle(float(body.get("timeout", 15)))
    return {"ok": True}


def routes(sim: ControlModel) -> list[Route]:
    repo = "/_sim/repos/{owner}/{repo}"
    pull = repo + "/pulls/{number:int}"
    table: list[tuple[str, list[str], Control, int]] = [
        ("/_sim/state", ["GET"], state, 200),
        ("/_sim/settle", ["POST"], settle, 200),
        ("/_sim/repos", ["POST"], create_repo, 201),
        (repo + "/forks", ["POST"], fork_repo, 201),
        (repo + "/collaborators/{user}", ["PUT"], set_permission, 200),
        (repo + "/push", ["POST"], push, 201),
        (repo + "/pulls", ["POST"], open_pr, 201),
        (repo + "/reviewer", ["PUT"], set_reviewer, 200),
        (repo + "/settings", ["PATCH"], repo_settings, 200),
        (repo + "/merge-queue", ["PUT"], merge_queue, 200),
        (repo + "/check-runs", ["POST"], set_check_run, 201),
        (repo + "/statuses", ["POST"], set_status, 201),
        (repo + "/comments/{id:int}", ["PATCH"], edit_comment, 200),
        (repo + "/comments/{id:int}", ["DELETE"], delete_comment, 200),
        (repo + "/threads/{node_id}/resolve", ["POST"], resolve_thread, 200),
        (pull + "/reviews", ["POST"], submit_review, 201),
        (pull + "/comments", ["POST"], comment, 201),
        (pull + "/replies", ["POST"], reply, 201),
        (pull + "/close", ["POST"], close_pr, 200),
        (pull + "/reopen", ["POST"], reopen_pr, 200),
        (pull + "/merge", ["POST"], merge_pr, 200),
        (pull + "/labels", ["POST"], add_labels, 200),
        (pull + "/mergeable", ["PUT"], set_mergeable, 200),
        (pull + "/request-review", ["POST"], request_review, 200),
        (pull + "/head-lag", ["GET", "PUT", "DELETE"], head_lag, 200),
        ("/_sim/webhooks", ["GET", "PUT"], webhooks, 200),
        ("/_sim/webhooks/faults", ["GET", "PUT"], webhook_faults, 200),
        ("/_sim/deliveries", ["GET"], deliveries, 200),
        ("/_sim/webhooks/chaos", ["GET", "PUT", "DELETE"], webhook_chaos, 200),
        ("/_sim/faults", ["GET", "POST", "DELETE"], faults, 200),
        ("/_sim/chaos", ["GET", "PUT", "DELETE"], chaos, 200),
        ("/_sim/ref-updates", ["GET"], ref_updates, 200),
        ("/_sim/duplicates", ["GET"], duplicates, 200),
        ("/_sim/counters", ["GET", "DELETE"], counters, 200),
        ("/_sim/side-effects", ["GET", "DELETE"], side_effects, 200),
        ("/_sim/hooks/post-receive", ["POST"], post_receive, 200),
    ]
    return [Route(path, _wrap(sim, handler, status), methods=methods)
            for path, methods, handler, status in table]
