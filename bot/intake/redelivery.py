"""Lost webhooks: ask GitHub again for deliveries that never reached /webhook.

GitHub does not deliver a failed webhook again by itself, so a `/converge` comment whose
delivery was lost (the bot down, a 503, a network fault) would be lost for good. A webhook has a
delivery log (one entry per attempt, newest first), and GitHub sends a logged delivery again
when asked, with the same `X-GitHub-Delivery` guid. A GitHub App reads its own log; with a token
the bot reads the logs of the organisations' and repositories' webhooks named in `[webhooks]
hooks`. Every interval the leader reads each log back to where its last read left off, and for
each guid that no attempt delivered and that our intake never recorded, asks for its newest
attempt again.

Bounded: at most `redelivery_max_attempts` redeliveries per guid, counted from the log's own
`redelivery: true` entries (so a restart does not start the count over), and at most
`MAX_ASKS_PER_RUN` asks and `MAX_PAGES` pages a run. The cursor (storage/cursors.py) moves only
over what is settled, and stays a margin behind the newest entry, whose neighbours may still
be in flight. Each log has its own cursor; one that cannot be read (a hook deleted, a token
without the rights) leaves the others to go on, and its repositories uncovered.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import structlog

from bot import metrics
from bot.github.errors import Conflict, GitHubError, NotFound
from bot.github.stamps import github_id, parse_time
from bot.runtime.periodic import duty_failed, every
from storage import cursors, deliveries
from storage.models import utcnow

log = structlog.get_logger(__name__)

CURSOR = "webhooks:redelivery"  # the App's log's; a hook's adds its path
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


@dataclass(frozen=True)
class Log:
    """A webhook's delivery log: the App's own (`hook` None), or the webhook of an organisation
    (`repo` None) or of a repository, read with the token."""

    owner: str | None = None
    repo: str | None = None
    hook_id: int | None = None

    @classmethod
    def named(cls, owner: str, hook_id: int) -> Log:
        """The log of the hook `[webhooks] hooks` names: `owner` an organisation or owner/repo."""
        org, _, repo = owner.partition("/")
        return cls(org, repo or None, hook_id)

    @property
    def hook(self) -> str | None:
        """The hook's API path (`orgs/acme/hooks/12`, `repos/acme/widgets/hooks/34`)."""
        if self.hook_id is None:
            return None
        if self.repo is None:
            return f"orgs/{self.owner}/hooks/{self.hook_id}"
        return f"repos/{self.owner}/{self.repo}/hooks/{self.hook_id}"

    @property
    def name(self) -> str:
        return self.hook or "app"

    @property
    def cursor(self) -> str:
        return CURSOR if self.hook is None else f"{CURSOR}:{self.hook.lower()}"

    def covers(self, repo: str) -> bool:
        """Whether `repo`'s (owner/name) deliveries are in this log."""
        if self.hook is None:
            return True
        owner, _, name = repo.lower().partition("/")
        # A hook's log has its owner (`named`): one without covers no repository.
        return (self.owner is not None and owner == self.owner.lower()
                and (self.repo is None or name == self.repo.lower()))


APP_LOG = Log()


def logs(rt) -> list[Log]:
    """The delivery logs this bot reads: the App's, or with a token those of the webhooks named
    in `[webhooks] hooks`; none while redelivery is off."""
    cfg = rt.config.webhooks
    if not cfg.redelivery or rt.github is None:
        return []
    if rt.github.is_app:
        return [APP_LOG]
    return [Log.named(owner, hook_id) for owner, hook_id in cfg.hooks.items()]


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
    """The log's entries at or after `since`, by guid. An entry without a guid, an id or a time
    (the log is not trusted to be well formed) is left out."""
    guids: dict[str, Guid] = {}
    for e in entries:
        at = parse_time(e.get("delivered_at"))
        guid, entry_id, status = e.get("guid"), github_id(e.get("id")), e.get("status_code")
        if at is None or at < since or not isinstance(guid, str) or entry_id is None:
            continue
        ok = isinstance(status, int) and 200 <= status < 300
        g = guids.get(guid)
        if g is None:
            guids[guid] = Guid(guid, str(e.get("event")), e.get("action"), entry_id, at, ok,
                               int(bool(e.get("redelivery"))))
            continue
        g.newest_id = max(g.newest_id, entry_id)
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
    ask: list[Guid] = []
    exhausted: list[Guid] = []
    waiting: list[Guid] = []
    still_open: list[Guid] = []
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

    def add(self, other: Report) -> None:
        """`other`'s counts and guids added to these (the cursor stays: each log has its own)."""
        self.pages += other.pages
        self.entries += other.entries
        self.failed += other.failed
        self.recorded += other.recorded
        self.asked += other.asked
        self.exhausted += other.exhausted
        self.waiting += other.waiting


@dataclass
class _LogState:
    """This process's asks not yet seen in one log (the log is the count that survives)."""

    pending: dict[str, tuple[int, float]] = field(default_factory=dict)  # guid -> (expected, asked at)
    refused: set[str] = field(default_factory=set)
    # When a pass last read the log to its cursor and made every ask it meant to (monotonic).
    covered_at: float | None = None


@dataclass
class RedeliveryState:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    logs: dict[Log, _LogState] = field(default_factory=dict)

    def of(self, log: Log) -> _LogState:
        return self.logs.setdefault(log, _LogState())


def _state(rt) -> RedeliveryState:
    if rt.redelivery is None:
        rt.redelivery = RedeliveryState()
    return rt.redelivery


async def _read(rt, where: Log, since: datetime) -> tuple[list[dict], int, bool]:
    """The log newest first, down to the first entry before `since`: (entries, pages, complete)."""
    entries: list[dict] = []
    cursor: str | None = None
    for pages in range(1, MAX_PAGES + 1):
        page, cursor = await rt.github.hook_deliveries(per_page=PAGE_SIZE, cursor=cursor, hook=where.hook)
        if not isinstance(page, list):
            raise GitHubError(f"delivery log {where.name}: a page is not a list")
        kept = [e for e in page if isinstance(e, dict)]
        entries.extend(kept)
        oldest = parse_time(kept[-1].get("delivered_at")) if kept else None
        # Only an empty page ends the log: one that held nothing readable is read past.
        if cursor is None or not page or (oldest is not None and oldest < since):
            return entries, pages, True
    log.warning("redelivery.log_not_finished", log_name=where.name, pages=MAX_PAGES,
                since=since.isoformat())
    return entries, MAX_PAGES, False


async def redeliver_missed(rt) -> Report | None:
    """One pass over each delivery log (`logs`), their reports added up; None when this replica
    does not lead or there is no log to read (redelivery off, or a token naming no hook). A log
    that cannot be read is logged and left uncovered; the others go on, and the first such
    error is raised after them."""
    if not await rt.leadership.holds():
        return None
    found = logs(rt)
    if not found:
        return None
    state = _state(rt)
    report: Report | None = None
    failure: GitHubError | None = None
    async with state.lock:
        for where in found:
            one = state.of(where)
            try:
                done = await _pass(rt, where, one)
            except GitHubError as e:
                one.covered_at = None
                log.warning("redelivery.unreadable", log_name=where.name, error=str(e))
                failure = failure or e
                continue
            except BaseException:
                one.covered_at = None  # what was lost since the last pass is not being recovered
                raise
            if report is None:
                report = done
            else:
                report.add(done)
    if failure is not None:
        raise failure
    return report


async def _pass(rt, where: Log, state: _LogState) -> Report:
    cfg = rt.config.webhooks
    stored = parse_time((await cursors.load(rt.db, where.cursor)).get(where.cursor))
    since = stored or utcnow() - timedelta(hours=cfg.redelivery_lookback_hours)
    entries, pages, complete = await _read(rt, where, since)
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
        log.warning("redelivery.gave_up_older", log_name=where.name, since=since.isoformat(),
                    cursor=plan.cursor.isoformat(), pages=pages)
    report = Report(pages=pages, entries=len(entries), failed=len(failed), recorded=len(recorded),
                    exhausted=[g.guid for g in plan.exhausted], waiting=[g.guid for g in plan.waiting])
    settled = True
    for g in plan.ask:
        bound = log.bind(log_name=where.name, delivery_id=g.guid, event_name=g.event, action=g.action,
                         log_entry=g.newest_id)
        try:
            await rt.github.redeliver(g.newest_id, hook=where.hook)
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
        log.warning("redelivery.exhausted", log_name=where.name, delivery_id=g.guid, event_name=g.event,
                    action=g.action, redeliveries=g.redeliveries)
    state.refused &= set(guids)  # the others are behind the cursor now: never read again
    if settled and plan.cursor != stored:
        await cursors.save(rt.db, {where.cursor: plan.cursor.isoformat()})
    # Covered: nothing missed is left to the other nets (a delivery given up on, or one GitHub
    # refuses to send again, is one only the scan and the poll can still find) or to a later
    # pass (more were missed than one pass asks for).
    lost = (bool(plan.exhausted) or any(g.guid in state.refused for g in plan.ask)
            or len(plan.ask) >= MAX_ASKS_PER_RUN)
    state.covered_at = time.monotonic() if settled and complete and not lost else None
    report.cursor = plan.cursor if settled else stored
    log.info("redelivery.checked", log_name=where.name, pages=report.pages, entries=report.entries,
             failed=report.failed, recorded=report.recorded, asked=len(report.asked),
             exhausted=len(report.exhausted), waiting=len(report.waiting),
             cursor=report.cursor.isoformat() if report.cursor else None)
    return report


def covers(rt, repo: str | None = None) -> bool:
    """Whether this process recovers lost webhooks right now (for `repo`, owner/name, when
    given): redelivery is on with a log to read (`logs`), one of them holds `repo`'s deliveries,
    and the last pass over each, within two intervals, read the whole log since its cursor and
    asked for everything missed, none of it given up on or refused. The poller lets PRs rest on
    it and the scan runs less often (docs/architecture.md, "Polling")."""
    found = logs(rt)
    if not found or (repo is not None and not holds(rt, repo)):
        return False
    state, now = _state(rt), time.monotonic()
    window = 2 * rt.config.webhooks.redelivery_interval_seconds
    for where in found:
        at = state.of(where).covered_at
        if at is None or now - at > window:
            return False
    return True


def holds(rt, repo: str) -> bool:
    """Whether one of the logs read (`logs`) holds `repo`'s (owner/name) deliveries: the config
    alone, whatever the passes did. `covers(rt) and holds(rt, repo)` is `covers(rt, repo)`."""
    return any(where.covers(repo) for where in logs(rt))


async def _tick(rt) -> None:
    try:
        await redeliver_missed(rt)
    except GitHubError as e:
        log.warning("redelivery.unavailable", error=str(e))
    except Exception as e:
        duty_failed(log, "redelivery.error", e)


def schedule(rt, scheduler) -> None:
    """Once at start and every `[webhooks] redelivery_interval_seconds`, on the leader."""
    cfg = rt.config.webhooks
    if not cfg.redelivery:
        log.info("redelivery.off", reason="[webhooks] redelivery is false")
        return
    if not logs(rt):
        log.info("redelivery.off",
                 reason="a token with no webhook named in [webhooks] hooks: no delivery log to read")
        return
    if rt.github.is_app and cfg.hooks:
        log.warning("redelivery.hooks_ignored", reason="a GitHub App reads its own delivery log",
                    hooks=sorted(cfg.hooks))
    every(scheduler, "redelivery", cfg.redelivery_interval_seconds, _tick, rt)
