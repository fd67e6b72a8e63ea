"""A dry run holds its round's waiting progress checks, and nothing else.

In a dry run the fixer does not run, so the round's deadline check would only find the branch
unmoved and call the round a husk; the fix job puts that run's checks of that round off
(`bot/engine/fixing.py`, `hold_round_checks`). The statement reaches no further: another job of
the round (a retried attempt's fix job), another run's or another round's checks, and a check
already running or finished are left as they are.
"""

from __future__ import annotations

from datetime import timedelta

from bot.engine.fixing import DRY_RUN_HOLD, hold_round_checks
from storage import jobs
from storage.keys import PrKey, ProcessKey
from storage.models import utcnow
from storage.statuses import JobKind

KEY = PrKey("acme", "app", 1)
RUN, OLD_RUN = ProcessKey("run-now"), ProcessKey("run-stopped")


async def test_a_dry_run_holds_its_round_s_waiting_checks_and_nothing_else(db):
    check = dict(kind=JobKind.PROGRESS_CHECK, pr_key=KEY, delay_seconds=60)
    queued = {
        "held": await jobs.enqueue(db, key="pc:now:2:0:deadline", process_key=RUN, round_no=2, **check),
        "retried attempt's fix": await jobs.enqueue(db, JobKind.FIX, "fix:now:2:1", pr_key=KEY, process_key=RUN,
                                                    round_no=2, delay_seconds=60),
        "stopped run's check": await jobs.enqueue(db, key="pc:stopped:2:0:deadline", process_key=OLD_RUN,
                                                  round_no=2, **check),
        "earlier round's check": await jobs.enqueue(db, key="pc:now:1:0:deadline", process_key=RUN,
                                                    round_no=1, **check),
        "running check": await jobs.enqueue(db, JobKind.PROGRESS_CHECK, "pc:now:2:0:fixer", pr_key=KEY,
                                            process_key=RUN, round_no=2),
    }
    running = await jobs.claim(db, "worker", 60)
    assert running is not None and running.key == "pc:now:2:0:fixer"
    before = {name: await jobs.get_job(db, job_id) for name, (job_id, _) in queued.items()}

    async with db.session() as s:
        await hold_round_checks(s, KEY, RUN, 2)

    after = {name: await jobs.get_job(db, job_id) for name, (job_id, _) in queued.items()}
    held = after.pop("held")
    assert held.run_at > utcnow() + DRY_RUN_HOLD - timedelta(minutes=1)
    assert held.last_error == "dry run: held, the fixer did not run"
    for name, job in after.items():
        assert (job.status, job.run_at, job.last_error) == (
            before[name].status, before[name].run_at, before[name].last_error), name
