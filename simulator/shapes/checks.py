"""Check runs, check suites and commit statuses."""

from __future__ import annotations

from ..gitstore import CommitInfo
from ..ids import iso, node_id
from ..state import CheckRun, CheckSuite, CommitStatus, PullRequest, Repo
from .commits import head_commit
from .context import RenderContext
from .repos import repository
from .users import user

_FAILING = ("failure", "error")


def app(ctx: RenderContext, slug: str) -> dict:
    owner = user(ctx, f"{slug}[bot]")
    return {
        "id": owner["id"],
        "slug": slug,
        "node_id": node_id("A", owner["id"]),
        "client_id": f"Iv1.{owner['id']}",
        "owner": owner,
        "name": slug,
        "description": "",
        "external_url": ctx.html(f"apps/{slug}"),
        "html_url": ctx.html(f"apps/{slug}"),
        "created_at": "2020-01-01T00:00:00Z",
        "updated_at": "2020-01-01T00:00:00Z",
        "permissions": {"checks": "write", "pull_requests": "write", "contents": "write"},
        "events": [],
    }


def _pr_ref(ctx: RenderContext, repo: Repo, pr: PullRequest, head: str, base: str) -> dict:
    mini = {"id": repo.id, "url": ctx.api(f"repos/{repo.full_name}"), "name": repo.name}
    return {
        "url": ctx.api(f"repos/{repo.full_name}/pulls/{pr.number}"),
        "id": pr.id,
        "number": pr.number,
        "head": {"ref": pr.head_ref, "sha": head, "repo": mini},
        "base": {"ref": pr.base_ref, "sha": base, "repo": mini},
    }


def check_run(ctx: RenderContext, repo: Repo, run: CheckRun,
              prs: list[tuple[PullRequest, str, str]]) -> dict:
    """`prs` are the open PRs whose head is this run's sha, with their (head, base) shas."""
    url = ctx.api(f"repos/{repo.full_name}/check-runs/{run.id}")
    output = {"title": None, "summary": None, "text": None, **run.output}
    return {
        "id": run.id,
        "head_sha": run.head_sha,
        "node_id": run.node_id,
        "external_id": run.external_id or "",
        "url": url,
        "html_url": ctx.html(f"{repo.full_name}/runs/{run.id}"),
        "details_url": run.details_url or ctx.html(f"{repo.full_name}/runs/{run.id}"),
        "status": run.status,
        "conclusion": run.conclusion,
        "started_at": iso(run.started_at),
        "completed_at": iso(run.completed_at),
        "output": {**{k: output[k] for k in ("title", "summary", "text")},
                   "annotations_count": len(run.annotations), "annotations_url": f"{url}/annotations"},
        "name": run.name,
        "check_suite": {"id": run.suite_id},
        "app": app(ctx, run.app),
        "pull_requests": [_pr_ref(ctx, repo, pr, head, base) for pr, head, base in prs],
    }


def annotation(ctx: RenderContext, repo: Repo, run: CheckRun, a: dict) -> dict:
    """One check-run annotation, as `GET .../check-runs/{id}/annotations` lists it."""
    return {
        "path": a["path"], "start_line": a["start_line"], "end_line": a["end_line"],
        "start_column": a.get("start_column"), "end_column": a.get("end_column"),
        "annotation_level": a["annotation_level"], "title": a.get("title"),
        "message": a["message"], "raw_details": a.get("raw_details"),
        "blob_href": ctx.html(f"{repo.full_name}/blob/{run.head_sha}/{a['path']}"),
    }


def suite_state(runs: list[CheckRun]) -> tuple[str, str | None]:
    """(status, conclusion) of a suite: completed only when every run is."""
    if not runs or any(r.status != "completed" for r in runs):
        return ("in_progress" if runs else "queued"), None
    conclusions = {r.conclusion for r in runs}
    for worst in ("failure", "startup_failure", "timed_out", "cancelled", "action_required"):
        if worst in conclusions:
            return "completed", worst
    return "completed", "success"  # success, neutral and skipped all pass


def check_suite(ctx: RenderContext, repo: Repo, suite: CheckSuite, runs: list[CheckRun],
                prs: list[tuple[PullRequest, str, str]], head: CommitInfo) -> dict:
    status, conclusion = suite_state(runs)
    return {
        "id": suite.id,
        "node_id": suite.node_id,
        "head_branch": suite.head_branch,
        "head_sha": suite.head_sha,
        "status": status,
        "conclusion": conclusion,
        "url": ctx.api(f"repos/{repo.full_name}/check-suites/{suite.id}"),
        "before": None,
        "after": suite.head_sha,
        "pull_requests": [_pr_ref(ctx, repo, pr, head, base) for pr, head, base in prs],
        "app": app(ctx, suite.app),
        "created_at": iso(suite.created_at),
        "updated_at": iso(suite.updated_at),
        "latest_check_runs_count": len(runs),
        "check_runs_url": ctx.api(f"repos/{repo.full_name}/check-suites/{suite.id}/check-runs"),
        "rerequestable": True,
        "runs_rerequestable": True,
        "head_commit": head_commit(head),
    }


def status(ctx: RenderContext, repo: Repo, s: CommitStatus) -> dict:
    return {
        "url": ctx.api(f"repos/{repo.full_name}/statuses/{s.sha}"),
        "avatar_url": None,
        "id": s.id,
        "node_id": s.node_id,
        "state": s.state,
        "description": s.description,
        "target_url": s.target_url,
        "context": s.context,
        "created_at": iso(s.created_at),
        "updated_at": iso(s.updated_at),
        "creator": user(ctx, s.creator),
    }


def combined_state(latest: list[CommitStatus]) -> str:
    """GitHub's rule: any failure/error fails; otherwise any pending (or none at all) is pending."""
    states = {s.state for s in latest}
    if states & set(_FAILING):
        return "failure"
    if not states or "pending" in states:
        return "pending"
    return "success"


def combined_status(ctx: RenderContext, repo: Repo, sha: str,
                    latest: list[CommitStatus]) -> dict:
    return {
        "state": combined_state(latest),
        "statuses": [status(ctx, repo, s) for s in latest],
        "sha": sha,
        "total_count": len(latest),
        "repository": repository(ctx, repo),
        "commit_url": ctx.api(f"repos/{repo.full_name}/commits/{sha}"),
        "url": ctx.api(f"repos/{repo.full_name}/commits/{sha}/status"),
    }
