"""The liveness watchdog's dated waits (bot/engine/liveness.py): a wait still open a poll interval
past its date, with no job to end it, is re-read and so ended; a wait not yet that late, one with
a job on its way, and a round waiting on an asked fixer are left alone.

The poller ticks once an hour here, so only the test's own call of the watchdog acts on a wait."""

from __future__ import annotations

from datetime import timedelta

from prometheus_client import REGISTRY
from sqlalchemy import update
from sqlmodel import col

from bot.engine import liveness
from bot.engine.dispatch import queue_progress
from storage import jobs
from storage.models import Job, PullRequest, Round, utcnow

from .harness import REPO, bot_on_simulator, open_and_enroll, quiesce, steps

INTERVAL = 3600.0


def _healed() -> float:
    return REGISTRY.get_sample_value("convergebot_liveness_healed_total") or 0.0


def _review_limit(h) -> timedelta:
    """How long a review wait lasts at most here: the reviewer's timeout (60 s), or the checks'
    timeout a clean review still waits out, whichever is longer."""
    c = h.rt.config
    return timedelta(seconds=max(c.convergence.review_wait_timeout_seconds, c.merge.checks_timeout_seconds))


async def _wait_began(h, key, ago: timedelta) -> None:
    async with h.rt.db.session() as s:
        await s.exec(update(PullRequest).where(PullRequest.pr_key == key).values(waiting_since=utcnow() - ago))


async def _in_hand(h, key) -> list[tuple[str, str]]:
    return [(j.kind, j.key) for j in await jobs.list_jobs(h.rt.db, key) if j.status in ("queued", "running")]


async def test_a_review_wait_an_interval_past_its_date_with_no_job_is_re_read_and_escalates(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url, poller={"interval_seconds": INTERVAL}) as h:
        key, _ = await open_and_enroll(h)  # no reviewer answers: the PR waits for a review
        await h.wait_status(key, "waiting_review")
        await quiesce(h)
        assert await _in_hand(h, key) == []
        # The wait's date (its start and the limit) passed over an interval ago, and no step
        # was woken for it.
        await _wait_began(h, key, _review_limit(h) + timedelta(seconds=INTERVAL + 60))
        before = _healed()
        assert await liveness.check(h.rt, [key]) == 1
        assert _healed() - before == 1
        # The re-read decides what the date called for: the wait is stalled, a maintainer asked.
        await h.wait_status(key, "escalated")
        assert [e.kind for e in await h.escalations(key)] == ["review_stalled"]
        # Escalated, the PR waits on a maintainer, which no date ends: nothing more to heal.
        await quiesce(h)
        assert await liveness.check(h.rt, [key]) == 0


async def test_a_wait_not_yet_an_interval_late_or_with_a_job_coming_is_left_alone(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url, poller={"interval_seconds": INTERVAL}) as h:
        key, _ = await open_and_enroll(h)
        view = await h.wait_status(key, "waiting_review")
        await quiesce(h)
        before = _healed()
        # Its date ahead: the wait began just now.
        assert view.pr.waiting_since is not None and utcnow() - view.pr.waiting_since < _review_limit(h)
        assert await liveness.check(h.rt, [key]) == 0
        # Its date passed, by less than an interval: the poller's next tick is still to come.
        await _wait_began(h, key, _review_limit(h) + timedelta(seconds=INTERVAL / 2))
        assert await liveness.check(h.rt, [key]) == 0
        # Overdue, but a job will read it (a sync put off for a rate limit).
        await _wait_began(h, key, _review_limit(h) + timedelta(seconds=INTERVAL + 60))
        await jobs.enqueue(h.rt.db, "sync", f"later:{key}", pr_key=key, delay_seconds=600)
        assert await liveness.check(h.rt, [key]) == 0
        assert _healed() == before
        assert await _in_hand(h, key) == [("sync", f"later:{key}")]
        assert (await h.view(key)).derived_status == "waiting_review"


async def test_a_round_waiting_on_the_asked_author_with_only_its_deadline_check_is_left_alone(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url, poller={"interval_seconds": INTERVAL},
                                fixer_config={"kind": "author", "timeout_seconds": 600}) as h:
        h.sim.set_reviewer(REPO, steps(1, 0))
        key, number = await open_and_enroll(h)

        async def asked():
            return [c for c in h.bot_comments(number) if "@dev" in c["body"]]

        await h.wait_for("the request to the author", asked)
        await h.wait_status(key, "converging")
        await quiesce(h)
        # The round's one job is its deadline check, ten minutes ahead; the row still holds the
        # review wait's start, long past, which a converging PR's wait is not dated by.
        (deadline,) = await _in_hand(h, key)
        assert deadline[0] == "progress_check" and deadline[1].endswith(":deadline")
        await _wait_began(h, key, _review_limit(h) + timedelta(seconds=INTERVAL + 60))
        before = _healed()
        assert await liveness.check(h.rt, [key]) == 0
        assert _healed() == before
        assert await _in_hand(h, key) == [deadline]
        assert (await h.view(key)).derived_status == "converging"


async def _asked_round(h):
    """A PR whose round waits on the asked author, quiet: its one job is the deadline check."""
    h.sim.set_reviewer(REPO, steps(1, 0))
    key, number = await open_and_enroll(h)

    async def asked():
        return [c for c in h.bot_comments(number) if "@dev" in c["body"]]

    await h.wait_for("the request to the author", asked)
    await h.wait_status(key, "converging")
    await quiesce(h)
    (deadline,) = await _in_hand(h, key)
    assert deadline[0] == "progress_check" and deadline[1].endswith(":deadline")
    return key


async def _jobs_give_up(h, key) -> None:
    """As after many failures: no job of the round is left to close it."""
    async with h.rt.db.session() as s:
        await s.exec(update(Job).where(Job.pr_key == key, col(Job.kind).in_(("fix", "progress_check")))
                     .values(status="failed", lease_owner=None))


def _on_call(monkeypatch, name: str, call_no: int, before):
    """Run `before` ahead of the `call_no`th call of liveness's `name` (a window between its reads)."""
    real, calls = getattr(liveness, name), [0]

    async def hooked(*args, **kwargs):
        calls[0] += 1
        if calls[0] == call_no:
            await before()
        return await real(*args, **kwargs)

    monkeypatch.setattr(liveness, name, hooked)
    return calls


_AUTHOR = {"kind": "author", "timeout_seconds": 600}


async def test_a_round_whose_deadline_check_is_queued_or_running_is_left_alone(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url, poller={"interval_seconds": INTERVAL}, fixer_config=_AUTHOR) as h:
        key = await _asked_round(h)
        before = _healed()
        # The author works: the round's only job is its deadline check, queued ten minutes ahead.
        assert await liveness.check(h.rt, [key]) == 0
        # The check running (a worker holds it): still a job that will close the round.
        async with h.rt.db.session() as s:
            await s.exec(update(Job).where(Job.pr_key == key, Job.kind == "progress_check").values(
                status="running", lease_owner="elsewhere", lease_until=utcnow() + timedelta(hours=1)))
        assert await liveness.check(h.rt, [key]) == 0
        assert _healed() == before
        assert [k for k, _ in await _in_hand(h, key)] == ["progress_check"]
        assert (await h.view(key)).derived_status == "converging"


async def test_a_check_queued_between_the_watchdog_s_two_reads_is_not_healed_again(tmp_path, db_url, monkeypatch):
    async with bot_on_simulator(tmp_path, db_url, poller={"interval_seconds": INTERVAL}, fixer_config=_AUTHOR) as h:
        key = await _asked_round(h)
        await _jobs_give_up(h, key)
        view = await h.view(key)
        (rnd,) = [r for r in await h.rounds(key) if r.round_no == view.pr.current_round]

        async def a_check_is_queued():  # by a step, between the watchdog's first and second reads
            async with h.rt.db.session() as s:
                await queue_progress(s, key, view.pr.process_key, rnd.round_no, rnd.attempt, "elsewhere",
                                     delay_seconds=3600)

        _on_call(monkeypatch, "_fixer_at_work", 1, a_check_is_queued)
        before = _healed()
        assert await liveness.check(h.rt, [key]) == 0
        assert _healed() == before
        assert [k for k, _ in await _in_hand(h, key)] == ["progress_check"]


async def test_a_rerun_dispatched_between_the_watchdog_s_second_reads_is_not_healed(tmp_path, db_url, monkeypatch):
    async with bot_on_simulator(tmp_path, db_url, poller={"interval_seconds": INTERVAL}, fixer_config=_AUTHOR) as h:
        key = await _asked_round(h)
        await _jobs_give_up(h, key)
        view = await h.view(key)
        (rnd,) = [r for r in await h.rounds(key) if r.round_no == view.pr.current_round]

        async def a_rerun_is_dispatched():  # after the second read of the jobs, before that of the rounds
            async with h.rt.db.session() as s:
                await s.exec(update(Round).where(Round.id == rnd.id).values(attempt=rnd.attempt + 1))
                await queue_progress(s, key, view.pr.process_key, rnd.round_no, rnd.attempt + 1, "deadline",
                                     delay_seconds=3600)

        _on_call(monkeypatch, "_fixer_at_work", 2, a_rerun_is_dispatched)
        before = _healed()
        assert await liveness.check(h.rt, [key]) == 0
        assert _healed() == before
        assert [j.key for j in await jobs.list_jobs(h.rt.db, key) if "watchdog" in j.key] == []


async def test_a_pr_that_left_converging_between_the_watchdog_s_reads_is_not_healed(tmp_path, db_url, monkeypatch):
    async with bot_on_simulator(tmp_path, db_url, poller={"interval_seconds": INTERVAL}, fixer_config=_AUTHOR) as h:
        key = await _asked_round(h)
        await _jobs_give_up(h, key)

        async def escalated():  # a maintainer was asked meanwhile: the round waits on them, not on a job
            async with h.rt.db.session() as s:
                await s.exec(update(PullRequest).where(PullRequest.pr_key == key).values(status="escalated"))

        _on_call(monkeypatch, "_fixer_at_work", 2, escalated)
        before = _healed()
        assert await liveness.check(h.rt, [key]) == 0
        assert _healed() == before
        assert [j.key for j in await jobs.list_jobs(h.rt.db, key) if "watchdog" in j.key] == []


async def test_an_overdue_wait_a_step_dated_again_between_the_reads_is_left_to_that_step(tmp_path, db_url,
                                                                                        monkeypatch):
    async with bot_on_simulator(tmp_path, db_url, poller={"interval_seconds": INTERVAL}) as h:
        key, _ = await open_and_enroll(h)
        await h.wait_status(key, "waiting_review")
        await quiesce(h)
        await _wait_began(h, key, _review_limit(h) + timedelta(seconds=INTERVAL + 60))
        real_in_hand = jobs.in_hand

        async def a_step_ran(db, pr_key, *args, **kwargs):
            # A step ran between the reads: it re-dated the wait (still past its date) and set
            # its own return, which this read of the jobs came too early to see.
            await _wait_began(h, key, _review_limit(h) + timedelta(seconds=INTERVAL + 120))
            return await real_in_hand(db, pr_key, *args, **kwargs)

        monkeypatch.setattr(liveness.jobs, "in_hand", a_step_ran)
        before = _healed()
        assert await liveness.check(h.rt, [key]) == 0
        assert _healed() == before
        assert await _in_hand(h, key) == []
