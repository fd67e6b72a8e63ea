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
    RECENT,
    SCOPES,
    STATUSES,
    ListQuery,
    QueryError,
    comment_url,
    fixer_runs,
    is_dry_run_state,
    list_page,
    needs_attention,
    open_escalations,
    pr_detail,
    stack_text,
)
from bot.surfaces.web import markdown
from bot.surfaces.web.api import path_key
from storage import prs
from storage.keys import PrKey, PrKeyError, try_parse_pr_key

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


async def dashboard(request: Request) -> HTMLResponse:
    """A page of the list (`ListQuery`, as the API takes it), the working set by default, with
    two filters of its own: needs attention, and waiting long."""
    rt = request.app.state.runtime
    db, q = rt.db, request.query_params
    attention = q.get("attention") in ("1", "on", "true")
    stale_only = q.get("stale") in ("1", "on", "true")
    stale_after = rt.config.dashboard.stale_after_seconds
    now = datetime.now(UTC)
    try:
        query = ListQuery.of(q)
    except QueryError as e:
        return _page(request, "error.html", 400, title="Not a list this page can show", message=str(e))
    rows, page = await list_page(db, query, asked_reviewers(rt.config))
    shown = [r for r in rows
             if (not attention or needs_attention(r)) and (not stale_only or waiting_long(r, now, stale_after))]
    by_key = {v.pr.pr_key: v.pr for v in page.views}
    keys = [r["pr_key"] for r in shown]
    # The fixer's runs and reruns over the run's rounds: a loop that keeps rerunning one round
    # shows here, where "round 5/8" alone would not tell it.
    fixer = await fixer_runs(db, keys) if shown else {}
    waiting = await open_escalations(db, keys) if shown else {}
    for r in shown:
        r["last_action"] = by_key[r["pr_key"]].last_action
        r["path"] = _path(r["pr_key"])
        r["attempts"], r["reruns"] = fixer.get(r["pr_key"], (0, 0))
        r["attention"] = needs_attention(r)
        r["stale"] = waiting_long(r, now, stale_after)
        r["stack_text"] = stack_text(r)
    asked = [(r, e) for r in shown for e in waiting.get(r["pr_key"], [])]
    following = request.url.include_query_params(cursor=page.next.text()) if page.next else None
    next_path = f"{following.path}?{following.query}" if following else None
    return _page(request, "list.html", rows=shown, open_escalations=asked, total=page.total,
                 repos=await prs.repositories(db), statuses=STATUSES, scopes=SCOPES, wanted_scope=query.scope,
                 wanted_status=query.status, wanted_repo=query.repo.lower(), attention=attention,
                 stale_only=stale_only, stale_after=_took(stale_after), next_page=next_path,
                 recent=_took(RECENT.total_seconds()), paged=query.after is not None,
                 filtered=bool(query.status or query.repo or attention or stale_only or query.scope != "current"),
                 refresh=REFRESH_SECONDS)


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
    detail["stack_paths"] = {k: _path(k) for k in detail.get("stack", ())}
    return _page(request, "pr.html", pr=detail)
