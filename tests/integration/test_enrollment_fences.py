"""The fences of enrollment and of a run's end, on SQLite and PostgreSQL: a stop meant for one run,
the reopen of one row, a check run's note of one run (tests/guards/fences.toml names the guard each
test kills)."""

from __future__ import annotations

from bot.engine.submit import abandon_pr, submit_pr
from storage import prs, runs
from storage.keys import parse_pr_key
from storage.models import PullRequest, utcnow

from ..helpers import enroll

KEY = "acme/widgets#1"


async def test_a_stop_meant_for_a_run_superseded_since_does_not_stop_the_next(db):
    """A `/converge stop` read run A; before it acted, A was stopped and a maintainer started run
    B (another replica, the CLI). The stop is A's: B goes on."""
    old = await enroll(db, KEY)
    assert await abandon_pr(db, KEY, "stopped by @other")
    new = await enroll(db, KEY)

    assert not await abandon_pr(db, KEY, "stopped by @maint", run=old)
    view = await prs.get(db, KEY)
    assert (view.pr.process_key, view.derived_status, view.run_state) == (new, "converging", "active")
    assert (await runs.get_run(db, new)).ended_at is None
    # The stop meant for B stops it.
    assert await abandon_pr(db, KEY, "stopped by @maint", run=new)
    assert (await prs.get(db, KEY)).derived_status == "abandoned"


async def test_a_resubmit_of_a_row_no_run_owns_reopens_that_row_alone(db):
    """Rows a crash left without a run's key (between the insert and the key's publication): the
    resubmit of one moves that one onto its run, and every other keyless row stays as it was."""
    now = utcnow()
    async with db.session() as s:
        for number in (1, 2):
            s.add(PullRequest(pr_key=f"acme/widgets#{number}", repo="acme/widgets", number=number, url="u",
                              title=f"t{number}", status="converging", current_round=3, process_key=None,
                              created_at=now, updated_at=now))

    result = await submit_pr(db, parse_pr_key(KEY))
    assert result.outcome == "started"
    view = await prs.get(db, KEY)
    assert (view.pr.process_key, view.pr.current_round, view.run_state) == (result.process_key, 1, "active")
    other = (await prs.get(db, "acme/widgets#2")).pr
    assert (other.process_key, other.current_round, other.title) == (None, 3, "t2"), \
        "the resubmit of #1 reopened #2 onto #1's run"


async def test_a_check_run_noted_for_a_superseded_run_leaves_the_next_runs_alone(db):
    """The check-run effect read the row under run A and made A's run on its head; before it
    noted the id, the PR was resubmitted and run B made and noted its own on the new head. A's
    late note must not put A's head and id back: B's next update would find its head unmarked and
    make a second check run on it."""
    old = await enroll(db, KEY)
    assert await prs.note_check_run(db, KEY, old, {"check_run_head": "a" * 40, "check_run_id": None})
    assert await abandon_pr(db, KEY, "stopped by @maint")
    new = await enroll(db, KEY)
    assert await prs.note_check_run(db, KEY, new, {"check_run_head": "b" * 40, "check_run_id": 2})

    assert not await prs.note_check_run(db, KEY, old, {"check_run_id": 1, "check_run_head": "a" * 40})
    pr = (await prs.get(db, KEY)).pr
    assert (pr.process_key, pr.check_run_head, pr.check_run_id) == (new, "b" * 40, 2)
