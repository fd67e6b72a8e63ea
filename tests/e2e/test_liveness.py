"""The liveness watchdog's dated waits (bot/engine/liveness.py): a wait still open a poll interval
past its date, with no job to end it, is re-read and so ended; a wait not yet that late, one with
a job on its way, and a round waiting on an asked fixer are left alone.

The poller ticks once an hour here, so only the test's own call of the watchdog acts on a wait."""

from __future__ import annotations

from datetime import timedelta

from prometheus_client import REGISTRY
from sqlalchemy import update

from bot.engine import liveness
from storage import jobs
from storage.models import PullRequest, utcnow

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
