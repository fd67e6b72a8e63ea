"""The repository scan: enrollment intent that no webhook brought.

A `/converge` comment, the enroll label and a PR by an auto-enroll author are news once, in a
webhook; a lost delivery would lose them for good, and the poller re-reads only PRs already
enrolled. So every `[scan] interval_seconds` the leader reads each repository with conditional
listings (its open PRs, and its PR and review comments updated since a stored cursor): a
repository where nothing changed answers 304 three times and costs no rate limit. What they
show is queued as the jobs the webhook would have queued, under the same keys, so whichever
comes first, the comment runs once (see docs/architecture.md, "Lost webhooks").
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import structlog
from apscheduler.schedulers.asyncio import AsyncIOScheduler

from bot import metrics
from bot.engine.enroll import enroll_rule
from bot.github.errors import GitHubError
from bot.github.stamps import parse_time
from bot.intake import redelivery
from bot.intake.routing import Wake, command_wake
from bot.rules.commands import edited
from bot.runtime.context import Runtime
from bot.runtime.periodic import duty_failed, every, side_by_side
from storage import commands, cursors, jobs, prs
from storage.keys import PrKey, try_parse_pr_key
from storage.models import utcnow
from storage.statuses import JobKind

log = structlog.get_logger(__name__)

CURSOR_PREFIX = "scan:"
KINDS = ("issue", "review")  # a PR's conversation comments, and its review (diff) comments
# `…/owner/repo/pull/N#issuecomment-ID` (or `#discussion_rID`): a comment on a PR, not an issue.
_ON_PULL = re.compile(r"/([^/]+)/([^/]+)/pull/(\d+)(?:[#?/]|$)")


@dataclass
class ScanReport:
    led: bool = True  # False: another replica leads and ran nothing here
    deferred: bool = False  # True: the rate limit is down to the reserve kept for PRs with news
    covered: bool = False  # True: left out, the redelivery recovers lost webhooks meanwhile
    repositories: int = 0
    unchanged: int = 0  # repositories whose every read GitHub answered 304 (no rate limit spent)
    unreadable: list[str] = field(default_factory=list)
    enrolls: int = 0  # enroll jobs queued
    commands: int = 0  # command jobs queued


@dataclass
class _Look:
    """One repository as this scan read it."""

    repo: str
    pulls: list[dict]
    comments: list[tuple[str, dict]]  # (kind, comment), kind as in KINDS
    cursors: dict[str, str]  # the cursors to store with the jobs this look leads to
    unchanged: bool


def _stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def _cursor(repo: str, kind: str) -> str:
    return f"{CURSOR_PREFIX}{repo.lower()}:{kind}"


async def repositories(rt: Runtime, known: list[str]) -> list[str]:
    """What to read: the configured repositories, and for a GitHub App its installation's, else
    (a token sees far more than the bot serves) the repositories of the PRs the bot knows."""
    found = list(rt.config.scan.repositories)
    found += await rt.github.installation_repositories() if rt.github.is_app else known
    unique: dict[str, str] = {}
    for repo in found:
        unique.setdefault(repo.lower(), repo)
    return list(unique.values())


async def _look(rt: Runtime, repo: str, stored: dict[str, str], floor: datetime) -> _Look | None:
    owner, _, name = repo.partition("/")
    gh = rt.github
    since = {kind: parse_time(stored.get(_cursor(repo, kind))) or floor for kind in KINDS}
    try:
        with gh.tracking_reads() as reads:
            pulls = await gh.open_pulls(owner, name)
            found = {kind: await gh.repo_comments(owner, name, since[kind], review=kind == "review")
                     for kind in KINDS}
    except GitHubError as e:
        log.warning("scan.unreadable", repo=repo, error=str(e))
        return None
    moved: dict[str, str] = {}
    for kind, items in found.items():
        # The cursor stays put until something newer shows, so the next read asks the same URL
        # and an unchanged listing answers 304; then it moves to the newest update seen (not
        # past it: a comment stamped later in that same second is read again, and dedup'd).
        newest = max((t for c in items if (t := parse_time(c.get("updated_at"))) is not None), default=None)
        at = _stamp(max(since[kind], newest) if newest else since[kind])
        if stored.get(_cursor(repo, kind)) != at:
            moved[_cursor(repo, kind)] = at
    comments = [(kind, c) for kind, items in found.items() for c in items if isinstance(c, dict)]
    return _Look(repo, pulls, comments, moved, reads.all_unchanged)


def _pull_key(comment: dict) -> PrKey | None:
    m = _ON_PULL.search(comment.get("html_url") or "")
    return try_parse_pr_key(f"{m[1]}/{m[2]}#{m[3]}") if m else None


def _enroll_wakes(rt: Runtime, look: _Look, known: set[PrKey], pending: set[PrKey]) -> list[Wake]:
    """An open PR carrying the label or by an auto-enroll author that the bot has no row for.
    A PR with a row is left alone: the bot knows it, and one stopped with `/converge stop`
    while the label stays on must stay stopped."""
    wakes = []
    for pull in look.pulls:
        key = try_parse_pr_key(f"{look.repo}#{pull.get('number')}")
        if key is None or enroll_rule(pull, rt.config.convergence) is None:
            continue
        if key in known or key in pending:
            continue
        # Keyed by the PR's `updated_at`: one job per state of the PR, so a PR the job found it
        # could not enroll is tried again once it changes.
        # `only_if_new`: the PR may have been enrolled (and stopped) since `known` was read.
        wakes.append(Wake(JobKind.ENROLL, f"enroll:{key}:scan:{pull.get('updated_at')}", key, {"only_if_new": True}))
    return wakes


def _command_wakes(looks: list[_Look], handled: set[int]) -> list[Wake]:
    wakes = []
    for look in looks:
        for kind, comment in look.comments:
            if comment.get("id") in handled:
                continue
            # Only what a comment said when it was posted is a command (an edit never is), and
            # an edited one no longer shows that: it is left out.
            if edited(comment):
                continue
            if (wake := command_wake(_pull_key(comment), comment, kind)) is not None:
                wakes.append(wake)
    return wakes


async def scan(rt: Runtime) -> ScanReport:
    """Read every repository once and queue what no webhook brought; the jobs and the cursors
    that led to them commit together, so a scan that fails midway reads the same again."""
    if not await rt.leadership.holds():
        return ScanReport(led=False)
    cfg = rt.config.scan
    last = rt.scan_started_at
    # What the scan would find is a delivery that failed, and the redelivery asks for those
    # again; left for the scan is one GitHub never attempted, read this much later. An App's
    # log holds every repository's; a token's hooks may hold only some, and the others are
    # read all the same (below).
    covered = (last is not None and time.monotonic() - last < cfg.covered_interval_seconds
               and redelivery.covers(rt))
    if covered and rt.github.is_app:
        log.info("scan.covered", reason="the redelivery recovers lost webhooks")
        return ScanReport(covered=True)
    if not rt.rate_budget.may_spend("idle"):
        # A changed repository costs requests, and the reserve is for PRs with news; the next
        # interval tries again (nothing is lost meanwhile: the cursors stay where they are).
        log.info("scan.deferred", reason="rate limit at the reserve")
        return ScanReport(deferred=True)
    started = time.monotonic()
    # The repositories of every PR ever enrolled, one indexed read: no PR row is loaded.
    repos = await repositories(rt, [] if rt.github.is_app else await prs.repositories(rt.db))
    served = len(repos)
    if covered:
        repos = [repo for repo in repos if not redelivery.holds(rt, repo)]
        if not repos:
            log.info("scan.covered", reason="the redelivery recovers lost webhooks")
            return ScanReport(covered=True)
    stored = await cursors.load(rt.db, CURSOR_PREFIX)
    floor = (utcnow() - timedelta(hours=cfg.lookback_hours)).replace(microsecond=0)
    # Side by side, as many at once as the client has slots for requests.
    answers = await side_by_side(lambda repo: _look(rt, repo, stored, floor), repos,
                                 rt.config.github.max_concurrency)
    looks = [look for look in answers if look is not None]
    report = ScanReport(repositories=len(repos), unchanged=sum(look.unchanged for look in looks),
                        unreadable=[repo for repo, look in zip(repos, answers, strict=True) if look is None])
    pending = await jobs.pending_pr_keys(rt.db, JobKind.ENROLL)
    # Which of the open PRs read have a row: asked for those alone, not the whole history.
    known = await prs.known(rt.db, [k for look in looks for pull in look.pulls
                                    if (k := try_parse_pr_key(f"{look.repo}#{pull.get('number')}")) is not None])
    enrolls = [w for look in looks for w in _enroll_wakes(rt, look, known, pending)]
    handled = await commands.known(rt.db, [c["id"] for look in looks for _, c in look.comments
                                           if isinstance(c.get("id"), int)])
    wakes = enrolls + _command_wakes(looks, handled)
    # A key queued before would be skipped anyway (a webhook or an earlier scan brought it);
    # leaving those out here only keeps the report and the wake-up honest.
    queued = await jobs.existing_keys(rt.db, [w.key for w in wakes])
    wakes = [w for w in wakes if w.key not in queued]
    moved = {name: at for look in looks for name, at in look.cursors.items()}
    if wakes or moved:
        async with rt.db.session() as s:
            # sqlmodel's AsyncSession runs it on its `sync_session`, a sqlmodel Session (what
            # `queue_wakes` takes); `run_sync`'s signature, SQLAlchemy's, names the base Session.
            await s.run_sync(jobs.queue_wakes, [w.job() for w in wakes])  # type: ignore[arg-type]
            await cursors.save_in(s, moved)
    report.enrolls = sum(w.kind == JobKind.ENROLL for w in wakes)
    report.commands = len(wakes) - report.enrolls
    metrics.SCAN_JOBS.labels("enroll").inc(report.enrolls)
    metrics.SCAN_JOBS.labels("command").inc(report.commands)
    metrics.SCANS.inc()
    if len(repos) == served:  # only a scan of them all restarts the covered interval
        rt.scan_started_at = started
    log.info("scan.done", repositories=report.repositories, unchanged=report.unchanged,
             unreadable=len(report.unreadable), enrolls=report.enrolls, commands=report.commands)
    if wakes:
        rt.wake_workers()
    return report


async def _scheduled(rt: Runtime) -> None:
    try:
        await scan(rt)
    except Exception as e:
        duty_failed(log, "scan.failed", e)


def schedule(rt: Runtime, scheduler: AsyncIOScheduler) -> None:
    """The scan as an interval job (first at start-up), unless `[scan] enabled` is off."""
    cfg = rt.config.scan
    if not cfg.enabled:
        return
    every(scheduler, "scan", cfg.interval_seconds, _scheduled, rt)
