"""How a PR is shown to people and programs: one JSON shape for the CLI, the API, the dashboard
and the demo (`pr_json`, a summary), one for a PR's full detail (`pr_detail`), and the few
whole-list reads the dashboard's list makes. All of it reads the database only."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from sqlalchemy import and_
from sqlmodel import col, select

from bot.engine import outbox
from bot.engine import write_budget as budget
from bot.engine.read import NONE, Dependencies, dependencies_of
from bot.redact import scrub, shown
from bot.rules.waiting import waiting
from storage import agent_attempts, commands, escalations, jobs, prs, rounds, runs
from storage.database import Database
from storage.keys import PrKey, ProcessKey, parse_pr_key
from storage.models import AgentAttempt, Command, Escalation, Job, PullRequest, Round, utcnow
from storage.prs import PrView
from storage.statuses import ACTIVE, Status

if TYPE_CHECKING:
    from bot.config import BudgetConfig


async def prs_json(db: Database, views: Sequence[PrView], reviewers: Sequence[str] = ()) -> list[dict]:
    """`pr_json` of each view, with its dependencies and its current round: one read of each for
    the views' PRs (a page of the list), none of the others'."""
    if not views:
        return []
    keys = [v.pr.pr_key for v in views]
    deps = await dependencies_of(db, keys)
    current = await current_rounds(db, keys)
    return [pr_json(v, deps.get(v.pr.pr_key, NONE), current.get(v.pr.pr_key), reviewers) for v in views]


SCOPES = ("current", "all")
STATUSES = tuple(s.value for s in Status)  # as `pr_json` shows them
RECENT = timedelta(days=7)  # a finished PR stays in the current list this long after its last change


class QueryError(ValueError):
    """A list query this bot cannot answer; the message says what it expects."""


@dataclass(frozen=True)
class ListQuery:
    """What a list of PRs asks for (the dashboard's form, `/api/prs`'s parameters, `status`):
    `current` is the working set (every unfinished PR, and those finished within `RECENT`),
    `all` the whole history; `status` is the status shown (`pr_json`'s), `repo` any case."""

    scope: str = "current"
    status: str = ""
    repo: str = ""
    after: prs.Cursor | None = None
    limit: int = 100

    @classmethod
    def of(cls, params: Mapping[str, str]) -> ListQuery:
        scope = params.get("scope") or "current"
        if scope not in SCOPES:
            raise QueryError(f"scope must be one of {', '.join(SCOPES)}, not {scope[:40]!r}")
        status = params.get("status") or ""
        if status and status not in STATUSES:
            raise QueryError(f"unknown status {status[:40]!r}: one of {', '.join(STATUSES)}")
        limit_text = params.get("limit") or "100"
        if not limit_text.isdigit() or not 1 <= int(limit_text) <= prs.PAGE_LIMIT:
            raise QueryError(f"limit must be a number from 1 to {prs.PAGE_LIMIT}, not {limit_text[:20]!r}")
        cursor = params.get("cursor")
        try:
            after = prs.Cursor.parse(cursor) if cursor else None
        except prs.CursorError as e:
            raise QueryError(str(e)) from None
        return cls(scope, status, (params.get("repo") or "").strip(), after, int(limit_text))


async def list_page(db: Database, q: ListQuery, reviewers: Sequence[str] = ()) -> tuple[list[dict], prs.Page]:
    """One page of `pr_json` rows as `q` asks, chosen by the database. A status shown as
    `abandoned` is also that of a row still stored active whose run ended (`derived_status`): those
    are read with it and told apart here, so a page may hold fewer rows than its limit."""
    stored: Collection[str] | None = None
    if q.status:
        stored = {q.status, *ACTIVE} if q.status == Status.ABANDONED else {q.status}
    page = await prs.page(db, statuses=stored, repo=q.repo or None, after=q.after, limit=q.limit,
                          changed_since=utcnow() - RECENT if q.scope == "current" else None)
    rows = await prs_json(db, page.views, reviewers)
    return [r for r in rows if not q.status or r["status"] == q.status], page


async def current_rounds(db: Database, pr_keys: Sequence[PrKey] | None = None) -> dict[PrKey, Round]:
    """Each PR's current round (of its run, at its round number), in one read."""
    stmt = (select(Round)
            .join(PullRequest, and_(col(PullRequest.pr_key) == col(Round.pr_key),
                                  col(PullRequest.process_key) == col(Round.process_key),
                                  col(PullRequest.current_round) == col(Round.round_no))))
    if pr_keys is not None:
        stmt = stmt.where(col(Round.pr_key).in_(pr_keys))
    async with db.read_session() as s:
        return {r.pr_key: r for r in (await s.exec(stmt)).all()}


def pr_json(view: PrView, deps: Dependencies, rnd: Round | None = None, reviewers: Sequence[str] = ()) -> dict:
    pr = view.pr
    iso = lambda t: t.isoformat() if t else None  # noqa: E731
    wait = waiting(view.derived_status, pr, rnd, deps.unmerged, reviewers)
    return {
        "pr_key": pr.pr_key,
        "title": pr.title,
        "url": pr.url,
        "status": view.derived_status,
        "stored_status": pr.status,
        "round": pr.current_round,
        "max_rounds": pr.max_rounds,
        "process_key": pr.process_key,
        "run_state": view.run_state,
        "converge_only": pr.converge_only,
        "head_sha": pr.head_sha,
        "latest_review_id": pr.latest_review_id,
        "gh_state": pr.gh_state,
        "outcome": pr.outcome,
        "depends_on": list(deps.depends_on),
        "unmerged_deps": list(deps.unmerged),
        # Where each of `depends_on` was given: `body` (a `Depends-on:` line), `explicit` (at
        # enrollment), or both.
        "dependency_sources": {k: list(v) for k, v in deps.sources.items()},
        # The stack the PR is in, bottom-up (it among them: its parents land first), else [].
        "stack": list(deps.stack),
        "synced_at": iso(pr.synced_at),
        "updated_at": iso(pr.updated_at),
        "converged_at": iso(pr.converged_at),
        "merged_at": iso(pr.merged_at),
        # Who or what an active PR waits on, and since when (bot/rules/waiting.py); null once finished.
        "waiting_on": wait.text if wait else None,
        "waiting_kind": wait.kind if wait else None,
        "waiting_since": iso(wait.since) if wait else None,
    }


async def fixer_runs(db: Database, pr_keys: Sequence[PrKey]) -> dict[str, tuple[int, int]]:
    """Per PR of `pr_keys`, the fixer's dispatches and reruns over the rounds of its current run,
    in one read for the page (a read per PR made the list cost a query per row every 15 s)."""
    stmt = (select(Round.pr_key, Round.attempt)
            .join(PullRequest, and_(col(PullRequest.pr_key) == col(Round.pr_key),
                                  col(PullRequest.process_key) == col(Round.process_key)))
            .where(col(Round.pr_key).in_(list(pr_keys))))
    out: dict[str, tuple[int, int]] = {}
    async with db.read_session() as s:
        for pr_key, attempt in (await s.exec(stmt)).all():
            runs_, reruns = out.get(pr_key, (0, 0))
            out[pr_key] = (runs_ + max(0, attempt + 1), reruns + max(0, attempt))
    return out


async def open_escalations(db: Database, pr_keys: Sequence[PrKey]) -> dict[str, list[Escalation]]:
    """The open escalations of `pr_keys`' PRs, in one read for the page."""
    out: dict[str, list[Escalation]] = {}
    async with db.read_session() as s:
        for e in await s.exec(select(Escalation).where(Escalation.status == "open", col(Escalation.pr_key).in_(list(pr_keys)))
                              .order_by(col(Escalation.id))):
            out.setdefault(e.pr_key, []).append(e)
    return out


async def oldest_waits(db: Database) -> dict[str, float]:
    """Per kind of wait, how long the active PR waiting so the longest has waited, in seconds."""
    views = await prs.list_all(db, active_only=True)
    keys = [v.pr.pr_key for v in views]
    deps, current = await dependencies_of(db, keys), await current_rounds(db, keys)
    now, out = utcnow(), dict[str, float]()
    for v in views:
        wait = waiting(v.derived_status, v.pr, current.get(v.pr.pr_key), deps.get(v.pr.pr_key, NONE).unmerged)
        if wait is not None and wait.since is not None:
            out[wait.kind] = max(out.get(wait.kind, 0.0), (now - wait.since).total_seconds())
    return out


def needs_attention(row: dict) -> bool:
    """Whether a `pr_json` row waits on a person: escalated (a question is open), or its run
    ended out of band while the row still reads active (a crash clean-up, a lost race: stuck,
    with nobody told). A PR abandoned on purpose, merged or converged needs no one; one
    waiting for a review, its dependencies or the merge is the bot's to wait for."""
    if row["status"] == Status.ESCALATED:
        return True
    return row["status"] == Status.ABANDONED and row["stored_status"] in ACTIVE


def dependencies_text(row: dict) -> str:
    """A `pr_json` row's dependencies in one line for people, those not merged yet marked, and
    the stack it is in."""
    deps = ", ".join(k + (" (not merged)" if k in row["unmerged_deps"] else "") for k in row["depends_on"])
    stack = f"stack {stack_text(row)}" if row.get("stack") else ""
    return "; ".join(t for t in (deps, stack) if t) or "-"


def stack_text(row: dict) -> str:
    """The stack a `pr_json` row is in, bottom-up: `#1 → [#2] → #3`, the row's own PR bracketed
    (PRs of another repository by their whole key)."""
    own = parse_pr_key(row["pr_key"])

    def name(text: str) -> str:
        key = parse_pr_key(text)
        short = f"#{key.number}" if key.full_repo == own.full_repo else text
        return f"[{short}]" if key == own else short

    return " → ".join(name(k) for k in row["stack"])


# -- a PR's full detail: its run's rounds, escalations, jobs and effects, as stored -----------

EFFECT_DONE = "done"
DETAIL_JOBS = 200  # newest jobs and effects shown; a long-lived PR may have thousands


def is_dry_run_state(state: str) -> bool:
    """Whether a job's state says it was recorded in a dry run and not performed (any other
    state, one added later included, is shown as it is stored)."""
    return state == outbox.DRY_RUN


def comment_url(pr_url: str | None, comment_id: int | None) -> str | None:
    """Where an issue comment of the PR is on GitHub (the PR page's anchor for it); None unless
    the PR's URL is http(s), as every link the dashboard draws from stored text."""
    if not pr_url or not comment_id or not pr_url.lower().startswith(("https://", "http://")):
        return None
    return f"{pr_url}#issuecomment-{comment_id}"


def _iso(t: datetime | None) -> str | None:
    return t.isoformat() if t else None


def findings_list(text: str | None) -> list[dict]:
    """A round's stored findings as `{body, path, line, author}` (what a person reads of them)."""
    try:
        items = json.loads(text or "[]")
    except ValueError:
        return [{"body": text, "path": None, "line": None, "author": None}]
    out = []
    for item in items if isinstance(items, list) else [items]:
        if isinstance(item, dict):
            out.append({"body": str(item.get("body") or ""), "path": item.get("path"),
                        "line": item.get("line") if isinstance(item.get("line"), int) else None,
                        "author": item.get("author")})
        else:
            out.append({"body": str(item), "path": None, "line": None, "author": None})
    return out


def _payload(job: Job) -> dict:
    try:
        p = json.loads(job.payload)
    except ValueError:
        return {}
    return p if isinstance(p, dict) else {}


def _replies_of(effects: list[Job], process_key: ProcessKey | None, round_no: int) -> dict:
    """The reply effects the run queued in this round: how many replies, and their states."""
    posted, states = 0, []
    for job in effects:
        p = _payload(job)
        if p.get("effect") == "reply" and job.process_key == process_key and p.get("round") == round_no:
            posted += len(p.get("replies") or [p])
            states.append(job.status)
    return {"count": posted, "states": states}


def agent_json(attempts: Sequence[AgentAttempt]) -> dict:
    """What the agent spent over `attempts`: dollars (None when no attempt's cost is known),
    tokens, seconds, and what its CLI said went wrong, last first."""
    costs = [a.cost_usd for a in attempts if a.cost_usd is not None]
    return {
        "attempts": len(attempts),
        "cost_usd": round(sum(costs), 4) if costs else None,
        "cost_known": len(costs) == len(attempts),
        "input_tokens": sum(a.input_tokens for a in attempts),
        "output_tokens": sum(a.output_tokens for a in attempts),
        "seconds": round(sum(a.seconds for a in attempts), 1),
        "failures": [scrub(a.failure) for a in reversed(attempts) if a.failure],
    }


def round_json(r: Round, effects: list[Job], spent: Sequence[AgentAttempt] = ()) -> dict:
    findings = findings_list(r.findings)
    return {
        "round": r.round_no,
        "kind": r.kind,
        "status": r.status or "in progress",
        "in_progress": r.status is None,
        "entry_head": r.entry_head,
        "exit_head": r.exit_head,
        "review_id": r.review_id,
        "findings_count": len(findings),
        "findings": findings,
        "summary": scrub(r.summary) if r.summary else r.summary,  # a husk's is its failure's text
        "fixer": r.fixer,
        "verdict": r.verdict,
        "question": scrub(r.question) if r.question else r.question,  # it may quote the summary
        # `attempt` numbers the fixer dispatches of the round from 0 (-1: none yet).
        "attempts": max(0, r.attempt + 1),
        "reruns": max(0, r.attempt),
        "replies": _replies_of(effects, r.process_key, r.round_no),
        "started_at": _iso(r.started_at),
        "ended_at": _iso(r.ended_at),
        "fixer_started_at": _iso(r.fixer_started_at),
        "fixer_finished_at": _iso(r.fixer_finished_at),
        "agent": agent_json([a for a in spent if a.process_key == r.process_key and a.round_no == r.round_no]),
    }


def escalation_json(e: Escalation, pr_url: str | None, answer_comment_id: int | None) -> dict:
    return {
        "id": e.id,
        "kind": e.kind,
        "round": e.round_no,
        "status": e.status,
        "question": scrub(e.question),  # it may quote a round's summary, shown scrubbed above
        "asked_at": _iso(e.asked_at),
        "answered": e.status == "answered",
        "answer": e.answer,
        "answered_by": e.answered_by,
        "answered_at": _iso(e.answered_at),
        "comment_id": e.comment_id,
        "comment_url": comment_url(pr_url, e.comment_id),
        "answer_comment_id": answer_comment_id,
        "answer_url": comment_url(pr_url, answer_comment_id),
    }


def _answer_comment(e: Escalation, answers: list[Command]) -> int | None:
    """The maintainer comment that answered `e`: the latest accepted `answer` command by its
    author made before the answer was written (None: answered from the CLI, or not answered)."""
    if e.answered_at is None:
        return None
    fitting = [c for c in answers if c.author == e.answered_by and c.created_at <= e.answered_at]
    return fitting[-1].comment_id if fitting else None


def job_json(job: Job) -> dict:
    # The API and the PR page are unauthenticated: a failure shows its kind and a short message,
    # never the paths, tokens or credentialed URLs its text may hold (the log has all of it).
    return {"id": job.id, "kind": job.kind, "status": job.status, "round": job.round_no,
            "attempts": job.attempts, "max_attempts": job.max_attempts, "created_at": _iso(job.created_at),
            "run_at": _iso(job.run_at), "finished_at": _iso(job.finished_at), "last_error": shown(job.last_error)}


def effect_json(job: Job) -> dict:
    p = _payload(job)
    return {**job_json(job), "effect": str(p.get("effect") or "?"),
            "dry_run": is_dry_run_state(job.status), "escalation_id": p.get("escalation_id")}


def effect_budget(effects: list[Job], escalation_rows: list[Escalation], cfg: BudgetConfig | None) -> dict:
    """The PR's writes and comments within the budget's window, counted as bot/engine/write_budget.py counts
    them: the runs' done effects of the last hour, or since a maintainer answered a runaway pause."""
    # Imported here: bot.engine.write_budget imports the engine, which imports these views.
    since = max([utcnow() - budget.WINDOW, *[e.answered_at for e in escalation_rows
                                             if e.kind == budget.RUNAWAY and e.answered_at is not None]])
    done = [j for j in effects if j.process_key is not None and j.status == EFFECT_DONE
            and j.finished_at is not None and j.finished_at >= since]
    comments = sum(budget.comments_of(j.payload) for j in done
                   if _payload(j).get("effect") in outbox.COMMENT_EFFECTS)
    return {"since": _iso(since), "writes": len(done), "comments": comments,
            "writes_per_hour": cfg.writes_per_hour if cfg else None,
            "comments_per_hour": cfg.comments_per_hour if cfg else None,
            "paused": any(e.kind == budget.RUNAWAY and e.status == "open" for e in escalation_rows)}


async def pr_detail(db: Database, view: PrView, budget_cfg: BudgetConfig | None = None,
                    reviewers: Sequence[str] = ()) -> dict:
    """Everything stored about one PR, for people (the dashboard's PR page) and programs (the
    API, `status --json`): `pr_json`, its run's rounds as a timeline, its escalations with
    links to their comments, its runs, its job history and its effects with the write budget.
    Only the database is read: showing a PR costs no GitHub request."""
    pr = view.pr
    deps = (await dependencies_of(db, [pr.pr_key])).get(pr.pr_key, NONE)
    all_jobs = await jobs.list_jobs(db, pr.pr_key)
    effects = [j for j in all_jobs if j.kind == outbox.KIND]
    other = [j for j in all_jobs if j.kind != outbox.KIND]
    history = [r for r in await rounds.for_pr(db, pr.pr_key) if r.process_key == pr.process_key]
    spent = [a for a in await agent_attempts.for_pr(db, pr.pr_key) if a.process_key == pr.process_key]
    esc = await escalations.for_pr(db, pr.pr_key)
    answers = [c for c in await commands.for_pr(db, pr.pr_key) if c.verb == "answer" and c.accepted]
    run_rows = await runs.runs_for(db, pr.pr_key)
    current = next((r for r in run_rows if r.process_key == pr.process_key), None)
    rnd = next((r for r in history if r.round_no == pr.current_round), None)
    return {
        **pr_json(view, deps, rnd, reviewers),
        "author": pr.author,
        "head_branch": pr.head_branch,
        "last_action": pr.last_action,
        "escalated_at": _iso(pr.escalated_at),
        "abandon_reason": current.reason if current and view.derived_status == Status.ABANDONED else None,
        "run_reason": current.reason if current else None,
        "rounds": sorted((round_json(r, effects, spent) for r in history), key=lambda r: r["round"]),
        "agent": agent_json(spent),
        "escalations": [escalation_json(e, pr.url, _answer_comment(e, answers)) for e in esc],
        "runs": [{"process_key": r.process_key, "kind": r.kind, "state": r.state, "reason": r.reason,
                  "started_at": _iso(r.started_at), "ended_at": _iso(r.ended_at)} for r in run_rows],
        "jobs": [job_json(j) for j in other[-DETAIL_JOBS:]],
        "jobs_total": len(other),
        "effects": [effect_json(j) for j in effects[-DETAIL_JOBS:]],
        "effects_total": len(effects),
        "effect_budget": effect_budget(effects, esc, budget_cfg),
    }
