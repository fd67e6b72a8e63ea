"""Reading a PR's snapshot: the database rows and the truth on GitHub at the current head."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import overload

from bot.config import Config
from bot.engine import outbox, repoconfig
from bot.github.endpoints.reviews import THREAD_COMMENTS_READ
from bot.github.stamps import github_id, parse_time
from bot.rules import reviewers
from bot.rules.decide import fresh_review
from bot.rules.findings import settled_of
from bot.rules.model import (
    CHECK_RUN_NAME,
    FAILED_CONCLUSIONS,
    Adjudication,
    Checks,
    Finding,
    PrState,
    Review,
    RoundState,
    Settings,
    Snapshot,
    Thread,
    known_fields,
)
from bot.runtime.context import Runtime
from storage import adjudications, dependencies, escalations, prs, rounds
from storage.database import Database
from storage.keys import PrKey
from storage.models import PullRequest, Round, utcnow
from storage.statuses import Status


def settings_of(rt: Runtime, config: Config | None = None) -> Settings:
    """The decision's settings; `config`: the PR's repository's (`repoconfig`), else the global."""
    c = (config or rt.config).convergence
    roster = reviewers.from_config(c.reviewers, c.reviewer)
    return Settings(
        reviewers=tuple(r.login for r in roster),
        reviewer_specs=roster,
        review_wait_timeout=timedelta(seconds=c.review_wait_timeout_seconds),
        nudge_window=timedelta(seconds=c.nudge_window_seconds),
        heal_grace=timedelta(seconds=c.escalation_heal_grace_seconds),
        fixer_kind=rt.config.fixer.kind,
        bot_login=rt.config.github.bot_login,
        churn_rounds=c.churn_rounds,
        block_on=c.block_on,
        checks_timeout=timedelta(seconds=rt.config.merge.checks_timeout_seconds),
    )


def asked_reviewers(config: Config) -> tuple[str, ...]:
    """The required reviewers `config` names (the global one, or a repository's effective one):
    whom a PR waiting for a review waits on, since the database does not keep whom a round asked."""
    c = config.convergence
    return tuple(r.login for r in reviewers.from_config(c.reviewers, c.reviewer) if r.required)


def review_of(raw: dict) -> Review:
    return Review(id=raw["id"], user=(raw.get("user") or {}).get("login") or "ghost",
                  state=raw.get("state") or "", commit_id=raw.get("commit_id"),
                  submitted_at=parse_time(raw.get("submitted_at")), body=raw.get("body") or "")


def comment_id_of(comment: dict) -> int | None:
    """A review comment's `fullDatabaseId` (a GraphQL BigInt, which GitHub sends as a string of
    digits) as an int; None when GitHub sent none, or not a positive 64-bit id."""
    value = comment.get("fullDatabaseId")
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 19:
        value = int(value)
    return github_id(value)


def thread_of(raw: dict) -> Thread:
    """A review thread as GraphQL sends it, where GitHub may null a comment (one the bot may not
    see: never its own reply) and a comment's author (a deleted account: `ghost`), body or id."""
    sent = (raw.get("comments") or {}).get("nodes") or []
    first = (sent[0] if sent else None) or {}
    marker = outbox.reply_marker(raw["id"])
    replied: bool | None = any(marker in (c.get("body") or "") for c in sent if c)
    if not replied and len(sent) >= THREAD_COMMENTS_READ:
        replied = None  # a long thread: our reply may be past the comments read
    author = (first.get("author") or {}).get("login") or ("ghost" if first else None)
    return Thread(id=raw["id"], is_resolved=bool(raw.get("isResolved")), is_outdated=bool(raw.get("isOutdated")),
                  path=raw.get("path"), line=raw.get("line"), comment_id=comment_id_of(first),
                  body=first.get("body") or "", author=author, replied=replied)


def checks_of(runs: list[dict], status: dict, required: list[str]) -> Checks:
    """Collapse check runs and commit statuses (ours excluded) into one verdict."""
    states: dict[str, str] = {}
    for run in runs:
        if not run or run.get("name") == CHECK_RUN_NAME:
            continue
        if run.get("status") != "completed":
            states[run["name"]] = "pending"
        else:
            states[run["name"]] = "failure" if run.get("conclusion") in FAILED_CONCLUSIONS else "success"
    for st in (status or {}).get("statuses") or []:
        if not st:
            continue
        ctx, state = st.get("context"), st.get("state")
        states[ctx] = {"success": "success", "pending": "pending"}.get(state, "failure")
    if required:
        for name in required:
            states.setdefault(name, "pending")
        states = {k: v for k, v in states.items() if k in required}
    failing = tuple(sorted(k for k, v in states.items() if v == "failure"))
    pending = tuple(sorted(k for k, v in states.items() if v == "pending"))
    return Checks("failure" if failing else "pending" if pending else "success", failing, pending)


def findings_of(text: str | None) -> tuple[Finding, ...] | None:
    if text is None:
        return None
    return tuple(Finding(**known_fields(Finding, f)) for f in json.loads(text))


def findings_json(findings) -> str:
    return json.dumps([f.__dict__ for f in findings])


@overload
def round_state(r: Round) -> RoundState: ...


@overload
def round_state(r: Round | None) -> RoundState | None: ...


def round_state(r: Round | None) -> RoundState | None:
    if r is None:
        return None
    return RoundState(round_no=r.round_no, entry_head=r.entry_head, review_id=r.review_id,
                      findings=findings_of(r.findings), fixer_started_at=r.fixer_started_at,
                      fixer_finished_at=r.fixer_finished_at, verdict=r.verdict, summary=r.summary,
                      question=r.question, status=r.status, attempt=r.attempt, kind=r.kind,
                      settled=settled_of(r.settled))


def pr_state(pr: PullRequest) -> PrState:
    return PrState(pr_key=pr.pr_key, status=pr.status, current_round=pr.current_round,
                   max_rounds=pr.max_rounds, waiting_since=pr.waiting_since,
                   last_review_id=pr.last_review_id, last_nudge_at=pr.last_nudge_at,
                   last_round_head=pr.last_round_head, husk_retries=pr.husk_retries,
                   escalated_at=pr.escalated_at)


async def memory_of(rt: Runtime, pr_key: PrKey) -> dict[str, Adjudication]:
    """The PR's live adjudications, by question fingerprint."""
    return {a.fingerprint: Adjudication(a.fingerprint, a.answer, a.adjudicated_by, a.adjudicated_at)
            for a in await adjudications.live_for(rt.db, pr_key)}


async def read_snapshot(rt: Runtime, pr: PullRequest, head: str | None, raw_reviews: list[dict]) -> Snapshot:
    key = pr.pr_key
    history = await rounds.history(rt.db, pr.pr_key, prs.process_key_of(pr))
    current = next((r for r in history if r.round_no == pr.current_round), None)
    config = await repoconfig.effective_config(rt, pr.repo)
    settings = settings_of(rt, config)
    reviews = tuple(review_of(r) for r in raw_reviews if isinstance(r.get("id"), int))
    snap = Snapshot(
        pr=pr_state(pr), round=round_state(current), head=head, reviews=reviews, threads=None,
        checks=Checks("success"),
        open_escalations=len(await escalations.open_for(rt.db, pr.pr_key)),
        adjudications=await memory_of(rt, pr.pr_key),
        now=utcnow(), settings=settings,
        history=tuple(round_state(r) for r in history if r.round_no < pr.current_round),
        forgotten_since=outbox.MEMORY.restore.taken_at if outbox.MEMORY.restore is not None else None,
    )

    if head is None or pr.status != "waiting_review" or fresh_review(snap) is None:
        return snap
    if (due := await outbox.next_due(rt.db, pr.pr_key, "reply")) is not None:
        return replace(snap, replies_due=due)
    # Only a fresh review needs threads and checks: that keeps the unchanged-PR poll free.
    raw_threads, runs, status = await rt.github.pr(key).review_state(head)
    checks = checks_of(runs, status, config.convergence.required_checks)
    return replace(snap, threads=tuple(thread_of(t) for t in raw_threads), checks=checks)


@dataclass(frozen=True)
class Dependencies:
    """A PR's dependencies: its `Depends-on:` PRs as the merge stage last read them from its
    body and those given at its enrollment, with where each was given (`body`, `explicit`, or
    both), and those of them the bot has not seen merged (a dependency it has no row for counts
    as not merged here; the merge stage itself asks GitHub about it)."""

    depends_on: tuple[PrKey, ...] = ()
    unmerged: tuple[PrKey, ...] = ()
    sources: Mapping[PrKey, tuple[str, ...]] = field(default_factory=dict)
    # The stack the PR is in (docs/stacks.md), bottom-up, the PR among them; empty when none.
    stack: tuple[PrKey, ...] = ()


NONE = Dependencies()


async def dependencies_of(db: Database, pr_keys: Collection[PrKey] | None = None) -> dict[PrKey, Dependencies]:
    """The dependency view of every PR (or of those in `pr_keys`) that has dependencies; the
    stack each is in is read only for `pr_keys` given (a page's)."""
    out = {}
    stacks = await dependencies.stacks(db, pr_keys) if pr_keys is not None else {}
    for pr_key in stacks:
        out[pr_key] = Dependencies(stack=stacks[pr_key])
    for pr_key, rows in (await dependencies.with_status(db, pr_keys)).items():
        sources: dict[PrKey, list[str]] = {}
        merged: set[PrKey] = set()
        for dep, status, source in rows:
            sources.setdefault(dep, []).append(source)
            if status == Status.MERGED:
                merged.add(dep)
        keys = sorted(sources, key=lambda k: (k.full_repo, k.number))
        out[pr_key] = Dependencies(tuple(keys), tuple(k for k in keys if k not in merged),
                                   {k: tuple(sorted(sources[k])) for k in keys}, stacks.get(pr_key, ()))
    return out
