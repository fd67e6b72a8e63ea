"""The `convergebot` check run on the PR head: round, findings left, last action.

`publish` queues an update through the outbox when what the check run would say changed; the
effect (bot/effects/check_run.py) renders from the row as it is when it runs and writes it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import structlog

from bot.config import Config
from bot.engine import outbox, repoconfig
from bot.engine.read import asked_reviewers, findings_of
from bot.fixers.prompt import location
from bot.rules.findings import normalised
from bot.rules.model import Finding
from bot.rules.waiting import waiting
from bot.runtime.context import Runtime
from storage import prs, rounds
from storage.keys import PrKey
from storage.models import Round
from storage.prs import PrView

log = structlog.get_logger(__name__)

_CONCLUSION = {"converged": "success", "merged": "success", "abandoned": "cancelled", "escalated": "neutral"}


# Non-blocking findings listed on the check run, and characters of each one's text: GitHub caps
# a check run's summary at 65,535 characters.
LISTED_CAP = 50
TEXT_CAP = 160


def non_blocking(optional: Sequence[Finding]) -> str:
    """The findings below `block_on`, one line each: where, how severe, whose, and what they say
    (normalised: no markup of the reviewer's reaches the check run)."""
    if not optional:
        return ""
    lines = [f"\n\n**Non-blocking findings ({len(optional)}),** below `block_on`; the fixer may take them up:\n"]
    for f in optional[:LISTED_CAP]:
        text = normalised(f.body)
        text = text if len(text) <= TEXT_CAP else text[:TEXT_CAP - 1] + "…"
        by = f" by {f.author}" if f.author else ""
        lines.append(f"- {f.severity} · {location(f)}{by}: {text}")
    if len(optional) > LISTED_CAP:
        lines.append(f"- … and {len(optional) - LISTED_CAP} more")
    return "\n".join(lines)


FIXER_SAID_CAP = 1000  # characters of the fixer's summary on the check run


def render(status: str, round_no: int, max_rounds: int, findings_left: int | None, last_action: str | None,
           config_problem: str | None = None, optional: Sequence[Finding] = (),
           fixer_said: str | None = None, waiting_on: str | None = None) -> dict:
    title = f"{status.replace('_', ' ')} · round {round_no}/{max_rounds}"
    if findings_left is not None:
        title += f" · {findings_left} finding(s) left"
    if optional:
        title += f" · {len(optional)} non-blocking"
    summary = (
        f"**Status:** {status}\n\n**Round:** {round_no} of {max_rounds}\n\n"
        f"**Findings left:** {'unknown' if findings_left is None else findings_left}\n\n"
        f"**Last action:** {last_action or '-'}"
    ) + (f"\n\n**Waiting on:** {waiting_on}" if waiting_on else "") + non_blocking(optional)
    if fixer_said:
        # The round's fixer finished and the run did not move on: what it said (what its CLI
        # reported went wrong, for an agent that changed nothing) is why the PR waits.
        said = fixer_said if len(fixer_said) <= FIXER_SAID_CAP else fixer_said[:FIXER_SAID_CAP - 1] + "…"
        summary += f"\n\n**The fixer said:**\n\n{_fenced(said)}"
    if config_problem:
        # The repository's own file was refused: said on every PR of it until it is mended.
        summary += (f"\n\n**Repository configuration ignored** (the global settings apply):\n\n"
                    f"{_fenced(config_problem)}")
    fields: dict = {"status": "in_progress", "output": {"title": title, "summary": summary}}
    if status in _CONCLUSION:
        fields = {"status": "completed", "conclusion": _CONCLUSION[status], "output": fields["output"]}
    return fields


def _fenced(text: str) -> str:
    """`text` as a code block no backtick run in it can close: shown, never rendered."""
    fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", text)), default=0))
    return f"{fence}text\n{text}\n{fence}"


def waiting_line(view: PrView, rnd: Round | None, config: Config) -> str | None:
    """Whom the PR waits on and since when, as the check run says it. A wait dated by the row's
    `updated_at` goes undated: that moves with every read, and the check run would be rewritten
    on each."""
    wait = waiting(view.derived_status, view.pr, rnd, reviewers=asked_reviewers(config))
    if wait is None:
        return None
    if wait.since is None or not wait.dated:
        return wait.text
    return f"{wait.text} since {wait.since.strftime('%Y-%m-%d %H:%M UTC')}"


def fields_of(view: PrView, rnd: Round | None, config_problem: str | None = None,
              config: Config | None = None) -> dict:
    """What the check run says for this row and its current round (and why its repository's
    `.github/convergebot.toml` was ignored, if it was); `config`: the repository's settings,
    which say whom a review is asked of."""
    pr = view.pr
    findings = findings_of(rnd.findings) if rnd is not None else None
    # Findings left: those that block; the rest are listed apart.
    left = None if findings is None else sum(not f.optional for f in findings)
    optional = [f for f in findings or () if f.optional]
    said = rnd.summary if rnd is not None and rnd.fixer_finished_at is not None else None
    return render(view.derived_status, pr.current_round, pr.max_rounds, left, pr.last_action, config_problem,
                  optional, said, waiting_line(view, rnd, config) if config is not None else None)


async def fields(rt: Runtime, view: PrView) -> dict:
    pr = view.pr
    rnd = await rounds.get(rt.db, pr.pr_key, pr.process_key, pr.current_round) if pr.process_key else None
    repo = await repoconfig.repo_config(rt, pr.repo)
    return fields_of(view, rnd, repo.problem, repo.config)


def said(rt: Runtime) -> dict:
    # What this process last wrote per PR: an unchanged PR costs no write. Empty after a
    # restart, so the first step of each PR re-sends what may have been lost with the crash.
    return rt.check_runs


def says(rt: Runtime, view: PrView, rnd: Round | None) -> bool:
    """Whether this process last wrote, on the row's head, what the row now says: a `publish`
    would queue nothing."""
    repo = repoconfig.current(rt, view.pr.repo)
    return said(rt).get(view.pr.pr_key) == (view.pr.head_sha, fields_of(view, rnd, repo.problem, repo.config))


async def publish(rt: Runtime, pr_key: PrKey) -> None:
    """Queue a check-run update when what it would say changed since this process last said it."""
    view = await prs.get(rt.db, pr_key)
    if view is None or not view.pr.head_sha:
        return
    if said(rt).get(pr_key) == (view.pr.head_sha, await fields(rt, view)):
        return
    settle = rt.config.github.check_run_settle_seconds
    async with rt.db.session() as s:
        await outbox.check_run(s, pr_key, settle)
    rt.wake_workers(settle)


