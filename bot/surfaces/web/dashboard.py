"""`/` and `/prs/{owner}/{repo}/{number}`: the pages for people, rendered on the server.

Jinja2 templates (bot/surfaces/web/templates/) with autoescape on; stored Markdown goes through
`bot.surfaces.web.markdown`. The list filters with a plain GET form, so a filtered view is a URL one
can share and the 15 s refresh keeps it. The PR page shows `pr_detail`, the API's shape: what
a person sees and what a program reads cannot drift apart.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse

from bot.engine.read import asked_reviewers
from bot.surfaces.views import (
    comment_url,
    fixer_runs,
    is_dry_run_state,
    needs_attention,
    open_escalations,
    pr_detail,
    prs_json,
)
from bot.surfaces.web import markdown
from bot.surfaces.web.api import path_key
from storage import prs
from storage.keys import PrKey, PrKeyError, try_parse_pr_key
from storage.statuses import Status

REFRESH_SECONDS = 15

_env = Environment(loader=FileSystemLoader(Path(__file__).with_name("templates")),
                   autoescape=select_autoescape(default=True, default_for_string=True))


def _when(value: datetime | str | None) -> datetime | None:
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.astimezone(UTC) if value else None


def utc_text(value: datetime | str | None) -> str:
    """`2026-11-30 19:10 UTC`: every time on the pages is UTC, and says so."""
    t = _when(value)
    return t.strftime("%Y-%m-%d %H:%M UTC") if t else "-"


def utc_iso(value: datetime | str | None) -> str:
    t = _when(value)
    return t.isoformat() if t else ""


def web_url(url: str | None) -> str:
    """A stored URL fit for an href: http(s) only (a row's URL came from outside)."""
    return url if url and url.lower().startswith(("https://", "http://")) else "#"


def would_text(job: dict) -> str:
    """What a job recorded in a dry run would have done: the summary the dry run wrote in its
    `last_error` ("dry run: would have merged at 3c0007f"), or else its effect or kind."""
    said = job.get("last_error") or ""
    if said.startswith("dry run: "):
        said = said.removeprefix("dry run: ")
    if said.startswith("would"):
        return said
    return "would have " + str(job.get("effect") or job["kind"]).replace("_", " ")


_env.filters.update(markdown=markdown.render, web_url=web_url, would=would_text, utc=utc_text, utc_iso=utc_iso, short=lambda s: (s or "")[:7])
_env.globals.update(comment_url=comment_url, is_dry_run_state=is_dry_run_state)


def _dry_run(request: Request) -> bool:
    return bool(getattr(request.app.state.runtime.config.github, "dry_run", False))


def _page(request: Request, template: str, status_code: int = 200, **context) -> HTMLResponse:
    html = _env.get_template(template).render(dry_run=_dry_run(request), **context)
    return HTMLResponse(html, status_code=status_code)


def _repo_of(pr_key: PrKey) -> str:
    return pr_key.rsplit("#", 1)[0]


async def dashboard(request: Request) -> HTMLResponse:
    db = request.app.state.runtime.db
    q = request.query_params
    wanted_status, wanted_repo = q.get("status", ""), q.get("repo", "").lower()
    attention = q.get("attention") in ("1", "on", "true")
    stale_only = q.get("stale") in ("1", "on", "true")
    stale_after = request.app.state.runtime.config.dashboard.stale_after_seconds
    now = datetime.now(UTC)
    views = await prs.list_all(db)
    rows = await prs_json(db, views, asked_reviewers(request.app.state.runtime.config)) if views else []
    repos = sorted({_repo_of(r["pr_key"]) for r in rows})
    shown = [r for r in rows
             if (not wanted_status or r["status"] == wanted_status)
             and (not wanted_repo or _repo_of(r["pr_key"]) == wanted_repo)
             and (not attention or needs_attention(r))
             and (not stale_only or waiting_long(r, now, stale_after))]
    by_key = {v.pr.pr_key: v.pr for v in views}
    # The fixer's runs and reruns over the run's rounds: a loop that keeps rerunning one round
    # shows here, where "round 5/8" alone would not tell it.
    fixer = await fixer_runs(db) if shown else {}
    waiting = await open_escalations(db) if shown else {}
    for r in shown:
        r["last_action"] = by_key[r["pr_key"]].last_action
        r["path"] = _path(r["pr_key"])
        r["attempts"], r["reruns"] = fixer.get(r["pr_key"], (0, 0))
        r["attention"] = needs_attention(r)
        r["stale"] = waiting_long(r, now, stale_after)
    asked = [(r, e) for r in shown for e in waiting.get(r["pr_key"], [])]
    statuses = [s.value for s in Status]
    return _page(request, "list.html", rows=shown, open_escalations=asked, total=len(rows), repos=repos, statuses=statuses,
                 wanted_status=wanted_status, wanted_repo=wanted_repo, attention=attention,
                 stale_only=stale_only, stale_after=_took(stale_after),
                 filtered=bool(wanted_status or wanted_repo or attention or stale_only), refresh=REFRESH_SECONDS)


def waiting_long(row: dict, now: datetime, stale_after: float) -> bool:
    """Whether a `pr_json` row has waited on the same thing longer than `[dashboard] stale_after_seconds`."""
    since = _when(row["waiting_since"])
    return since is not None and (now - since).total_seconds() > stale_after


def _took(seconds: float) -> str:
    return f"{seconds / 3600:g} h" if seconds >= 3600 else f"{seconds / 60:g} min"


def _path(pr_key: PrKey) -> str:
    key = try_parse_pr_key(pr_key)
    return f"/prs/{key.owner}/{key.repo}/{key.number}" if key else "/"


async def pr_page(request: Request) -> HTMLResponse:
    try:
        key = path_key(request)
    except PrKeyError as e:
        return _page(request, "error.html", 400, title="Not a pull request", message=str(e))
    rt = request.app.state.runtime
    view = await prs.get(rt.db, key)
    if view is None:
        return _page(request, "error.html", 404, title="Not enrolled", message=f"{key} is not enrolled.")
    detail = await pr_detail(rt.db, view, rt.config.budget, asked_reviewers(rt.config))
    detail["dependency_paths"] = {k: _path(k) for k in detail["depends_on"]}
    detail["dependency_statuses"] = {k: ("not merged" if k in detail["unmerged_deps"] else "merged")
                                     for k in detail["depends_on"]}
    return _page(request, "pr.html", pr=detail)
