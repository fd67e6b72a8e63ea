"""Lost webhooks: ask GitHub again for deliveries that never reached /webhook.

GitHub does not deliver a failed webhook again by itself, so a `/converge` comment whose
delivery was lost (the bot down, a 503, a network fault) would be lost for good. A GitHub App
can read its delivery log (one entry per attempt, newest first) and ask for a redelivery, which
comes with the same `X-GitHub-Delivery` guid. Every interval the leader reads the log back to
where the last read left off, and for each guid that no attempt delivered and that our intake
never recorded, asks for its newest attempt again.

Bounded: at most `redelivery_max_attempts` redeliveries per guid, counted from the log's own
`redelivery: true` entries (so a restart does not start the count over), and at most
`MAX_ASKS_PER_RUN` asks and `MAX_PAGES` pages a run. The cursor (storage/cursors.py) moves only
over what is settled, and stays a margin behind the newest entry, whose neighbours may still
be in flight.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import structlog

from storage import cursors, deliveries
from storage.models import utcnow

from . import metrics
from .github.errors import Conflict, GitHubError, NotFound
from .github.stamps import parse_time
from .periodic import every

log = structlog.get_logger(__name__)

CURSOR = "webhooks:redelivery"
PAGE_SIZE = 100
# A pass reads back to its cursor, so this bounds the deliveries one interval may bring: 1,000
# PRs under way sent ~12,000 in five minutes (30 pages, the bound before, fell behind at once).
# The log is read with the App's JWT, not the installation's rate limit.
MAX_PAGES = 200
MAX_ASKS_PER_RUN = 50
# The cursor stays this far behind the newest entry read: attempts still under way when the
# log was read show up later with an earlier `delivered_at`.
SETTLE_MARGIN = timedelta(minutes=2)
# An ask whose redelivery has not shown in the log after this long is taken as lost.
PENDING_SECONDS = 600.0
# The events that carry a person's intent (a command, the label, a new PR by an auto-enroll
# author): asked for first. The others only wake syncs, which the poller does anyway.
INTENT_EVENTS = frozenset({"issue_comment", "pull_request", "pull_request_review_comment"})


@dataclass
class Guid:
    """Everything the log says about one delivery (a guid), from its entries read."""

    guid: str
    event: str
    action: str | None
    newest_id: int  # the entry to redeliver
    oldest_at: datetime
    delivered: bool  # some attempt was answered 2xx
    redeliveries: int  # entries with `redelivery: true`


def group(entries: Iterable[Mapping], since: datetime) -> dict[str, Guid]:
    """The log's entries at or after `since`, by guid."""
    guids: dict[str, Guid] = {}
    for e in entries:
        at = parse_time(e.get("delivered_at"))
        guid = e.get("guid")
        if at is None or at < since or not isinstance(guid, str):
            continue
        ok = 200 <= int(e.get("status_code") or 0) < 300
        g = guids.get(guid)
        if g is None:
            guids[guid] = Guid(guid, str(e.get("event")), e.get("action"), int(e["id"]), at, ok,
                               int(bool(e.get("redelivery"))))
            continue
        g.newest_id = max(g.newest_id, int(e["id"]))
        g.oldest_at = min(g.oldest_at, at)
        g.delivered = g.delivered or ok
        g.redeliveries += bool(e.get("redelivery"))
    return guids


@dataclass
class Plan:
    ask: list[Guid]  # oldest first
    exhausted: list[Guid]  # asked for the most times already
    waiting: list[Guid]  # an ask of ours has not shown in the log yet
    cursor: datetime  # every delivery before it is settled


def decide(guids: Mapping[str, Guid], *, recorded: set[str], pending: Mapping[str, int],
           refused: set[str], max_attempts: int, since: datetime, newest_at: datetime | None,
           complete: bool, oldest_at: datetime | None = None, per_run: int = MAX_ASKS_PER_RUN) -> Plan:
    """What to ask for, and how far the log is settled. `pending`: guid -> the redeliveries
    the log should show once our last ask of it landed; `refused`: guids GitHub would not
    redeliver (too old, gone). Intent events are asked for first, then the rest, each oldest
    first. `complete`: the read reached `since`; if not (more entries than a run reads), the
    cursor moves to the oldest entry read (`oldest_at`): the entries older than that are given
    up, or every later run would read the same newest pages and never get further."""
    ask, exhausted, waiting, still_open = [], [], [], []
    for g in sorted(guids.values(), key=lambda g: (g.event not in INTENT_EVENTS, g.oldest_at, g.newest_id)):
        if g.delivered or g.guid in recorded or g.guid in refused:
            continue
        if g.redeliveries >= max_attempts:
            exhausted.append(g)
        elif pending.get(g.guid, 0) > g.redeliveries:
            waiting.append(g)
            still_open.append(g)
        else:
            if len(ask) < per_run:
                ask.append(g)
            still_open.append(g)  # its redelivery may fail too
    cursor = since
    settled_to = newest_at - SETTLE_MARGIN if complete and newest_at is not None else oldest_at
    if settled_to is not None:
        cursor = max(since, min([settled_to, *(g.oldest_at for g in still_open)]))
    return Plan(ask, exhausted, waiting, cursor)


@dataclass
class Report:
    pages: int = 0
    entries: int = 0
    failed: int = 0  # guids no attempt delivered
    recorded: int = 0  # of those, recorded by our intake all the same (its answer was lost)
    asked: list[str] = field(default_factory=list)
    exhausted: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    cursor: datetime | None = None


@dataclass
class _State:
    """This process's asks not yet seen in the log (the log is the count that survives)."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    pending: dict[str, tuple[int, float]] = field(default_factory=dict)  # guid -> (expected, asked at)
    refused: set[str] = field(default_factory=set)
    # When a pass last read the log to its cursor and made every ask it meant to (monotonic).
    covered_at: float | None = None


def _state(rt) -> _State:
    return rt.extras.setdefault("redelivery", _State())


async def _read(rt, since: datetime) -> tuple[list[dict], int, bool]:
    """The log newest first, down to the first entry before `since`: (entries, pages, complete)."""
    entries: list[dict] = []
    cursor: str | None = None
    for pages in range(1, MAX_PAGES + 1):
        page, cursor = await rt.github.hook_deliveries(per_page=PAGE_SIZE, cursor=cursor)
        entries.extend(page)
        oldest = parse_time(page[-1].get("delivered_at")) if page else None
        if cursor is None or not page or (oldest is not None and oldest < since):
            return entries, pages, True
    log.warning("redelivery.log_not_finished", pages=MAX_PAGES, since=since.isoformat())
    return entries, MAX_PAGES, False


async def redeliver_missed(rt) -> Report | None:
    """One pass over the App's delivery log; None when this replica does not lead, or the bot
    is not a GitHub App (only an App has a delivery log)."""
    if not await rt.leadership.holds():
        return None
    if not rt.github.is_app:
        return None
    state = _state(rt)
    async with state.lock:
        try:
            return await _pass(rt, state)
        except BaseException:
            state.covered_at = None  # what was lost since the last pass is not being recovered
            raise


async def _pass(rt, state: _State) -> Report:
    cfg = rt.config.webhooks
    stored = parse_time((await cursors.load(rt.db, CURSOR)).get(CURSOR))
    since = stored or utcnow() - timedelta(hours=cfg.redelivery_lookback_hours)
    entries, pages, complete = await _read(rt, since)
    guids = group(entries, since)
    failed = [g for g in guids if not guids[g].delivered]
    recorded = await deliveries.seen(rt.db, failed)
    now = time.monotonic()
    for guid, (expected, asked_at) in list(state.pending.items()):
        landed = guid in guids and (guids[guid].delivered or guids[guid].redeliveries >= expected)
        if landed or now - asked_at > PENDING_SECONDS:
            del state.pending[guid]
    stamps = [at for e in entries if (at := parse_time(e.get("delivered_at"))) is not None]
    plan = decide(guids, recorded=recorded, refused=state.refused,
                  pending={g: expected for g, (expected, _) in state.pending.items()},
                  max_attempts=cfg.redelivery_max_attempts, since=since,
                  newest_at=max(stamps, default=None), complete=complete, oldest_at=min(stamps, default=None))
    if not complete:
        log.warning("redelivery.gave_up_older", since=since.isoformat(), cursor=plan.cursor.isoformat(),
                    pages=pages)
    report = Report(pages=pages, entries=len(entries), failed=len(failed), recorded=len(recorded),
                    exhausted=[g.guid for g in plan.exhausted], waiting=[g.guid for g in plan.waiting])
    settled = True
    for g in plan.ask:
        bound = log.bind(delivery_id=g.guid, event_name=g.event, action=g.action, log_entry=g.newest_id)
        try:
            await rt.github.redeliver(g.newest_id)
        except (NotFound, Conflict) as e:
            # Gone from the log or too old to send again: nothing more to ask for.
            state.refused.add(g.guid)
            metrics.REDELIVERIES.labels("refused").inc()
            bound.warning("redelivery.refused", error=str(e))
            continue
        except GitHubError as e:
            # GitHub may have taken the ask all the same (a lost answer): count it as made.
            state.pending[g.guid] = (g.redeliveries + 1, time.monotonic())
            bound.warning("redelivery.failed", error=str(e))
            settled = False
            break
        state.pending[g.guid] = (g.redeliveries + 1, time.monotonic())
        report.asked.append(g.guid)
        metrics.REDELIVERIES.labels("asked").inc()
        bound.info("redelivery.asked", redelivery=g.redeliveries + 1)
    for g in plan.exhausted:
        log.warning("redelivery.exhausted", delivery_id=g.guid, event_name=g.event, action=g.action,
                    redeliveries=g.redeliveries)
    state.refused &= set(guids)  # the others are behind the cursor now: never read again
    if settled and plan.cursor != stored:
        await cursors.save(rt.db, {CURSOR: plan.cursor.isoformat()})
    # Covered: nothing missed is left to the other nets (a delivery given up on, or one GitHub
    # refuses to send again, is one only the scan and the poll can still find) or to a later
    # pass (more were missed than one pass asks for).
    lost = (bool(plan.exhausted) or any(g.guid in state.refused for g in plan.ask)
            or len(plan.ask) >= MAX_ASKS_PER_RUN)
    state.covered_at = time.monotonic() if settled and complete and not lost else None
    report.cursor = plan.cursor if settled else stored
    log.info("redelivery.checked", pages=report.pages, entries=report.entries, failed=report.failed,
             recorded=report.recorded, asked=len(report.asked), exhausted=len(report.exhausted),
             waiting=len(report.waiting), cursor=report.cursor.isoformat() if report.cursor else None)
    return report


def covers(rt) -> bool:
    """Whether this process recovers lost webhooks right now: it is a GitHub App with redelivery
    on, and its last pass, within two intervals, read the whole log since its cursor and asked
    for everything missed, none of it given up on or refused. The poller lets PRs rest on it and
    the scan runs less often (docs/architecture.md, "Polling")."""
    cfg = rt.config.webhooks
    if not cfg.redelivery or rt.github is None or not rt.github.is_app:
        return False
    at = _state(rt).covered_at
    return at is not None and time.monotonic() - at <= 2 * cfg.redelivery_interval_seconds


async def _tick(rt) -> None:
    try:
        await redeliver_missed(rt)
    except GitHubError as e:
        log.warning("redelivery.unavailable", error=str(e))
    except Exception:
        log.exception("redelivery.error")


def schedule(rt, scheduler) -> None:
    """Once at start and every `[webhooks] redelivery_interval_seconds`, on the leader."""
    cfg = rt.config.webhooks
    if not cfg.redelivery:
        log.info("redelivery.off", reason="[webhooks] redelivery is false")
        return
    if not rt.github.is_app:
        log.info("redelivery.off", reason="not a GitHub App: only an App can read its webhook delivery log")
        return
    every(scheduler, "redelivery", cfg.redelivery_interval_seconds, _tick, rt)
