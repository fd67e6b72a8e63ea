"""The check run effect: make the `convergebot` check run on the current head say what the row
says (bot/engine/check_summary.py renders it), finding the run a lost answer may already have
created before creating one; held while the PR has other work in hand."""

from __future__ import annotations

from datetime import timedelta

import structlog

from bot.engine import check_summary, outbox
from bot.rules.model import CHECK_RUN_NAME
from bot.runtime.context import Runtime
from bot.runtime.workers import Reschedule
from storage import jobs, prs
from storage.keys import PrKey
from storage.models import Job, utcnow
from storage.prs import PrView
from storage.statuses import Status

log = structlog.get_logger(__name__)


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
    the run's updates fell from 2.5 to 2.1 a PR (BENCHMARKS.md at acb9095, "2 December, afternoon"). A
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
    if await jobs.in_hand(rt.db, prs.pr_key_of(job), job.id, now + settle,
                          besides_prefix=outbox.effect_key_prefix("check_run")):
        # Each wait as long as the update has waited so far: a few looks, not one per settle
        # window (at a busy hour, when every PR has work in hand, those were a claim and a
        # reschedule every 5 s for each waiting update).
        wait = max(settle, now - job.created_at)
        raise Reschedule(min(now + wait, until), "check run held: the PR has other work in hand")
    return True


async def write_run(rt: Runtime, pr_key: PrKey, job: Job | None = None) -> None:
    """The effect: make the check run on the current head say what the row says. `job`: the
    update's job, which the row read here may `hold` first."""
    key = pr_key
    # Read, look and create under the PR's mutation lock (in this process): two updates of one
    # PR on two workers must not both find no run on the head and both create one, and the row
    # read under it shows the run the other may have just made. One read of the row and its
    # round per update (two of each before: one outside the lock to skip an unchanged update),
    # and the row once more after a hold's look that found nothing else in hand (see `hold`).
    async with rt.github.pr(pr_key).mutating():
        view = await prs.get(rt.db, pr_key)
        if view is not None and view.pr.head_sha and job is not None and await hold(rt, job, view):
            view = await prs.get(rt.db, pr_key)
        if view is None or not view.pr.head_sha:
            return
        pr, head = view.pr, view.pr.head_sha
        fields = await check_summary.fields(rt, view)
        if check_summary.said(rt).get(pr_key) == (head, fields):
            return
        run_id = await _run_on(rt, view, head)
        if run_id is None:
            run_id = (await rt.github.pr(key).create_check_run(name=CHECK_RUN_NAME,
                                                       head_sha=head, **fields))["id"]
        else:
            await rt.github.pr(key).update_check_run(run_id, **fields)
        check_summary.said(rt)[pr_key] = (head, fields)
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
    # On a restored backup the mark may be older than GitHub: a run made since is looked for.
    unmarked = pr.check_run_head != head and not outbox.MEMORY.restored
    if unmarked and pr.process_key and await prs.note_check_run(
            rt.db, pr.pr_key, pr.process_key, {"check_run_head": head, "check_run_id": None}):
        return None
    key = pr.pr_key
    app = rt.config.github.bot_login.removesuffix("[bot]").lower()
    ours = [r for r in await rt.github.pr(key).check_runs(head, name=CHECK_RUN_NAME)
            if ((r.get("app") or {}).get("slug") or "").lower() == app]
    return min((r["id"] for r in ours), default=None)


async def said_in_dry_run(rt: Runtime, pr_key: PrKey) -> str | None:
    """Take the check run as said, in this process, as it would have been written: `publish`
    then queues no update until the row changes again (else every step of an unchanged PR
    would queue one, never written). What it would say, for the record; None: nothing to say."""
    view = await prs.get(rt.db, pr_key)
    if view is None or not view.pr.head_sha:
        return None
    fields = await check_summary.fields(rt, view)
    check_summary.said(rt)[pr_key] = (view.pr.head_sha, fields)
    return f"set the convergebot check run on {view.pr.head_sha[:7]} to {fields['output']['title']!r}"


async def check_run(rt: Runtime, job: Job, p: dict) -> None:
    await write_run(rt, prs.pr_key_of(job), job)
