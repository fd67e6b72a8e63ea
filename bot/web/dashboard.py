"""`/`: one page for people: the enrolled PRs, their rounds and the open escalations."""

from __future__ import annotations

from html import escape

from starlette.requests import Request
from starlette.responses import HTMLResponse

from bot.views import Dependencies, dependencies_of
from storage import escalations, prs, rounds

_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{padding:.3em .7em;border-bottom:1px solid #ddd;
text-align:left;vertical-align:top}th{background:#f4f4f4}.s{font-weight:600}
.escalated{color:#b35900}.merged,.converged{color:#1a7f37}.abandoned{color:#888}
details{margin:.2em 0}code{font-size:12px}.waiting{color:#b35900}
"""


def _dependencies(deps: Dependencies | None) -> str:
    if deps is None:
        return "-"
    return "<br>".join(escape(k) + (' <span class="waiting">not merged</span>' if k in deps.unmerged
                                    else ' <span class="merged">merged</span>') for k in deps.depends_on)


def _row(cells: list[str]) -> str:
    return "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


async def dashboard(request: Request) -> HTMLResponse:
    db = request.app.state.runtime.db
    views = await prs.list_all(db)
    deps = await dependencies_of(db)
    body = [f"<h1>convergebot</h1><p>{len(views)} PR(s) enrolled · refreshes every 15 s</p>"]
    open_esc = []
    table = ["<table><tr><th>PR</th><th>title</th><th>status</th><th>round</th>"
             "<th>depends on</th><th>last action</th><th>updated</th></tr>"]
    for v in views:
        pr = v.pr
        status = escape(v.derived_status)
        history = [r for r in await rounds.for_pr(db, pr.pr_key) if r.process_key == pr.process_key]
        detail = "".join(
            f"<div>round {r.round_no}: {escape(r.status or 'in progress')} · "
            f"<code>{escape((r.entry_head or '')[:7])}</code>→<code>{escape((r.exit_head or '')[:7])}</code>"
            f"{' · ' + escape(r.summary[:120]) if r.summary else ''}</div>" for r in history)
        table.append(_row([
            f'<a href="{escape(pr.url)}">{escape(pr.pr_key)}</a>',
            escape(pr.title) + (f"<details><summary>{len(history)} round(s)</summary>{detail}</details>"
                                if history else ""),
            f'<span class="s {status}">{status}</span>',
            f"{pr.current_round}/{pr.max_rounds}",
            _dependencies(deps.get(pr.pr_key)),
            escape(pr.last_action or "-"),
            escape(pr.updated_at.strftime("%Y-%m-%d %H:%M:%S")),
        ]))
        open_esc += [(pr, e) for e in await escalations.open_for(db, pr.pr_key)]
    table.append("</table>")
    body += table
    body.append(f"<h2>Open escalations ({len(open_esc)})</h2>")
    if open_esc:
        body.append("<table><tr><th>PR</th><th>#</th><th>kind</th><th>question</th><th>asked</th></tr>")
        body += [_row([escape(pr.pr_key), str(e.id), escape(e.kind), escape(e.question).replace("\n", "<br>"),
                       escape(e.asked_at.strftime("%Y-%m-%d %H:%M"))]) for pr, e in open_esc]
        body.append("</table>")
    else:
        body.append("<p>None.</p>")
    page = (f'<!doctype html><html><head><meta charset="utf-8"><meta http-equiv="refresh" content="15">'
            f"<title>convergebot</title><style>{_STYLE}</style></head><body>{''.join(body)}</body></html>")
    return HTMLResponse(page)
