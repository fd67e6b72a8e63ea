"""/livez, /readyz and /metrics."""

from __future__ import annotations

import shutil
from datetime import timedelta

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from bot import metrics as process_metrics
from bot.config import Config
from bot.fixers import presets
from bot.logs import get_logger
from bot.rules.waiting import KINDS
from bot.surfaces.views import oldest_waits
from storage.models import utcnow

log = get_logger(__name__)


async def livez(request: Request) -> JSONResponse:
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> JSONResponse:
    """Whether this replica can take webhooks: 503 when the database, the scheduler or the poller
    is unhealthy, or the bot has no GitHub credentials or fixer command at all (`missing_setup`).

    GitHub's own trouble (credentials it rejects, no answer for `[github] unreachable_after_seconds`)
    is listed under `github` but is no 503 here: taking a webhook needs only the database, and
    a delivery recorded during an outage is worked on when GitHub is back, where one refused by
    every replica at once (all of them see the same GitHub) would be lost to GitHub's retries.
    `/readyz?include=github` counts it too (503): the probe for an alert, not for a balancer.

    Public, so each problem names the part and never the error: exception text carries
    addresses, SQL and paths. The log has the error.
    """
    rt = request.app.state.runtime
    h = rt.health
    problems: list[str] = []
    try:
        async with rt.db.read_session() as s:  # a read: never the write lock
            await s.exec(text("SELECT 1"))
    except Exception as e:
        # Said when it starts, not at every probe of an outage.
        if not h.database_unreachable:
            log.warning("readyz.database_unreachable", error=type(e).__name__, detail=str(e)[:300])
        h.database_unreachable = True
        problems.append("database unreachable")
    else:
        if h.database_unreachable:
            log.info("readyz.database_back")
        h.database_unreachable = False
    github = rt.github.reach.problems(timedelta(seconds=rt.config.github.unreachable_after_seconds))
    if request.query_params.get("include") == "github":
        problems += github
    problems += missing_setup(rt.config)
    if not h.scheduler_running:
        problems.append("scheduler not running")
    interval = rt.config.poller.interval_seconds
    stale_after = timedelta(seconds=3 * interval + rt.config.poller.jitter_seconds + 30)
    now = utcnow()
    if h.last_poll_error:
        problems.append("last poll failed")  # the poller logged why (poller.failed)
    elif h.last_poll_at is None:
        if h.started_at is None or now - h.started_at > stale_after:
            problems.append("no poll has completed")
    elif now - h.last_poll_at > stale_after:
        problems.append(f"last poll {int((now - h.last_poll_at).total_seconds())}s ago")
    body = {
        "status": "ok" if not problems else "unavailable",
        "problems": problems,
        "github": github,  # GitHub's trouble: a 503 only with ?include=github
        "last_poll_at": h.last_poll_at.isoformat() if h.last_poll_at else None,
        # On PostgreSQL one replica polls (the leader); the others' ticks only ask.
        "leader": h.leader,
        # Not a fault of the process, so not a 503: PRs a maintainer must look at.
        "paused_runaway": h.runaway,
    }
    return JSONResponse(body, status_code=200 if not problems else 503)


def missing_setup(config: Config) -> list[str]:
    """What the bot cannot work without, looked at on every probe (a fixer installed later
    clears it): GitHub credentials, and the `command` fixer's program. Public, so the program
    is not named (it may be a path of the machine); `convergebot doctor` names it."""
    problems = []
    if not config.github.has_credentials:
        problems.append("no GitHub credentials (github.token, or github.app_id and github.private_key_path)")
    fixer = config.fixer
    if fixer.kind == "command" and not shutil.which(presets.program(fixer.command, fixer.preset)):
        problems.append("the fixer's command is not found (`convergebot doctor` names it)")
    return problems


async def metrics(request: Request) -> Response:
    try:
        rt = request.app.state.runtime
        process_metrics.leader(rt.health.leader)
        await process_metrics.count_prs(rt.db)
        await process_metrics.count_jobs(rt.db, utcnow())
        process_metrics.oldest_waits(KINDS, await oldest_waits(rt.db))
    except Exception as e:  # the process's own metrics are still worth serving
        log.warning("metrics.prs_not_counted", error=type(e).__name__, detail=str(e)[:300])
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
