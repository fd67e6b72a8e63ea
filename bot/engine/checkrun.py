"""The `convergebot` check run on the PR head: round, findings left, last action.

`publish` queues an update through the outbox when what the check run would say changed;
`sync`, the effect's handler, renders from the row as it is when it runs and writes it to
GitHub, finding the run a lost answer may already have created before creating one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import timedelta

import structlog

from bot.effects import outbox
from bot.engine import repoconfig
from bot.engine.read import findings_of
from bot.fixers.prompt import location
from bot.prkey import parse_pr_key
from bot.rules.findings import normalised
from bot.rules.model import CHECK_RUN_NAME, Finding
from bot.runtime.context import Runtime
from bot.runtime.workers import Reschedule
from storage import jobs, prs, rounds
from storage.models import Job, Round, utcnow
from storage.prs import PrView
from storage.statuses import Status

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
           fixer_said: str | None = None) -> dict:
    title = f"{status.replace('_', ' ')} · round {round_no}/{max_rounds}"
    if findings_left is not None:
        title += f" · {findings_left} finding(s) left"
    if optional:
        title += f" · {len(optional)} non-blocking"
    summary = (
        f"**Status:** {status}\n\n**Round:** {round_no} of {max_rounds}\n\n"
        f"**Findings left:** {'unknown' if findings_left is None else findings_left}\n\n"
        f"**Last action:** {last_action or '-'}"
    ) + non_blocking(optional)
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


def fields_of(view: PrView, rnd: Round | None, config_problem: str | None = None) -> dict:
    """What the check run says for this row and its current round (and why its repository's
    `.github/convergebot.toml` was ignored, if it was)."""
    pr = view.pr
    findings = findings_of(rnd.findings) if rnd is not None else None
    # Findings left: those that block; the rest are listed apart.
    left = None if findings is None else sum(not f.optional for f in findings)
    optional = [f for f in findings or () if f.optional]
    said = rnd.summary if rnd is not None and rnd.fixer_finished_at is not None else None
    return render(view.derived_status, pr.current_round, pr.max_rounds, left, pr.last_action, config_problem,
                  optional, said)


async def _fields(rt: Runtime, view: PrView) -> dict:
    pr = view.pr
    rnd = await rounds.get(rt.db, pr.pr_key, pr.process_key, pr.current_round) if pr.process_key else None
    return fields_of(view, rnd, (await repoconfig.repo_config(rt, pr.repo)).problem)


def _said(rt: Runtime) -> dict:
    # What this process last wrote per PR: an unchanged PR costs no write. Empty after a
    # restart, so the first step of each PR re-sends what may have been lost with the crash.
    return rt.extras.setdefault("check_runs", {})


def says(rt: Runtime, view: PrView, rnd: Round | None) -> bool:
    """Whether this process last wrote, on the row's head, what the row now says: a `publish`
    would queue nothing."""
    problem = repoconfig.current(rt, view.pr.repo).problem
    return _said(rt).get(view.pr.pr_key) == (view.pr.head_sha, fields_of(view, rnd, problem))


async def publish(rt: Runtime, pr_key: str) -> None:
    """Queue a check-run update when what it would say changed since this process last said it."""
    view = await prs.get(rt.db, pr_key)
    if view is None or not view.pr.head_sha:
        return
    if _said(rt).get(pr_key) == (view.pr.head_sha, await _fields(rt, view)):
        return
    settle = rt.config.github.check_run_settle_seconds
    async with rt.db.session() as s:
        await outbox.check_run(s, pr_key, settle)
    rt.wake_workers(settle)


# The merge stage's steps: each lasts as long as the work in hand that ends it (the merge, its
# sync), and none is worth a write of its own on the way to merged.
_ON_THE_WAY = frozenset({Status.WAITING_DEPS, Status.WAITING_MERGE, Status.MERGING})


async def hold(rt: Runtime, job: Job, view: PrView) -> bool:
    """Put the update `job` off (`Reschedule`) while its PR (`view`, the row as the update read
    it) is on the way to the merge with other work due or running (its sync, the merge, another
    write). At a busy hour the merge comes tens of seconds after the decision, past the settle
    window, and "waiting merge" then "merged" were two writes on every PR. At most
    `[github] check_run_hold_seconds` after the update was queued: a PR whose work never stops
    still shows where it is.

    A round's fixer (the PR converging, its fix due or at work) is held the same way, for at
    most `[github] check_run_fix_hold_seconds`: a fixer that pushes within it moves the PR to a
    new head, whose run the update then creates, and the head it left keeps the stage it
    showed; none of its own write for a fix. At 1,000 PRs, where fixes wait for a fixer worker,
    the run's updates fell from 2.5 to 2.1 a PR (BENCHMARKS.md, "2 December, afternoon"). A
    fixer at work longer than that shows, as each head shows its round.

    True when it looked and found nothing else in hand: the row is then to be read again. The
    work that moves the PR on writes the row before it ends (the merge writes "merged", then its
    job is done), so a look that found that job ended may come after a row read that still said
    "merging"; a row read after the look shows what the ended work wrote."""
    cfg = rt.config.github
    now = utcnow()
    if view.derived_status in _ON_THE_WAY:
        limit = cfg.check_run_hold_seconds
    elif view.derived_status == Status.CONVERGING:
        limit = cfg.check_run_fix_hold_seconds
    else:
        return False
    until = job.created_at + timedelta(seconds=limit)
    if now >= until:
        return False
    settle = timedelta(seconds=max(cfg.check_run_settle_seconds, 1.0))
    # Not another update of the run (one queued while this one ran): it renders the same row,
    # and two updates holding each other would wait out the hold.
    if await jobs.in_hand(rt.db, job.pr_key, job.id, now + settle,
                          besides_prefix=outbox.effect_key_prefix("check_run")):
        # Each wait as long as the update has waited so far: a few looks, not one per settle
        # window (at a busy hour, when every PR has work in hand, those were a claim and a
        # reschedule every 5 s for each waiting update).
        wait = max(settle, now - job.created_at)
        raise Reschedule(min(now + wait, until), "check run held: the PR has other work in hand")
    return True


async def sync(rt: Runtime, pr_key: str, job: Job | None = None) -> None:
    """The effect: make the check run on the current head say what the row says. `job`: the
    update's job, which the row read here may `hold` first."""
    key = parse_pr_key(pr_key)
    # Read, look and create under the PR's mutation lock (in this process): two updates of one
    # PR on two workers must not both find no run on the head and both create one, and the row
    # read under it shows the run the other may have just made. One read of the row and its
    # round per update (two of each before: one outside the lock to skip an unchanged update),
    # and the row once more after a hold's look that found nothing else in hand (see `hold`).
    async with rt.github.mutating(pr_key):
        view = await prs.get(rt.db, pr_key)
        if view is not None and view.pr.head_sha and job is not None and await hold(rt, job, view):
            view = await prs.get(rt.db, pr_key)
        if view is None or not view.pr.head_sha:
            return
        pr, head = view.pr, view.pr.head_sha
        fields = await _fields(rt, view)
        if _said(rt).get(pr_key) == (head, fields):
            return
        run_id = await _run_on(rt, view, head)
        if run_id is None:
            run_id = (await rt.github.create_check_run(key.owner, key.repo, name=CHECK_RUN_NAME,
                                                       head_sha=head, **fields))["id"]
        else:
            await rt.github.update_check_run(key.owner, key.repo, run_id, **fields)
        _said(rt)[pr_key] = (head, fields)
        if pr.check_run_id != run_id and pr.process_key:
            await prs.note_check_run(rt.db, pr_key, pr.process_key, {"check_run_id": run_id, "check_run_head": head})


async def _run_on(rt: Runtime, view: PrView, head: str) -> int | None:
    """Our check run on `head`, or None when one is to be created.

    Before the first create on a head the row is marked (`check_run_head` = head, no id yet),
    so an unmarked head has no run of ours and needs no look on GitHub. A marked head without
    an id had a create begun whose answer may have been lost (or a crash came before the id was
    stored): GitHub is asked, and a run found there is updated instead of making a second."""
    pr = view.pr
    if pr.check_run_head == head and pr.check_run_id is not None:
        return pr.check_run_id
    if pr.check_run_head != head and pr.process_key and await prs.note_check_run(
            rt.db, pr.pr_key, pr.process_key, {"check_run_head": head, "check_run_id": None}):
        return None
    key = parse_pr_key(pr.pr_key)
    app = rt.config.github.bot_login.removesuffix("[bot]").lower()
    ours = [r for r in await rt.github.check_runs(key.owner, key.repo, head, name=CHECK_RUN_NAME)
            if ((r.get("app") or {}).get("slug") or "").lower() == app]
    return min((r["id"] for r in ours), default=None)
