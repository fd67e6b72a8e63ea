"""Idle PRs are cheap: the poller queues a tick's syncs in one transaction, and the sync of a PR
that GitHub answered 304 for writes nothing unless something is due. Both backends."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from sqlalchemy import event, update

from bot.fixers import ScriptedFixer
from bot.intake.poller import Poller
from storage import jobs, prs
from storage.models import Job, PullRequest, utcnow
from storage.statuses import SameWork

from ..e2e.harness import COPILOT, REPO, bot_on_simulator, quiesce
from ..helpers import enroll

AUTH = {"Authorization": "Bearer api-token"}


# -- the batch enqueue ------------------------------------------------------------------------


async def test_enqueue_per_pr_queues_one_per_pr_and_skips_those_already_queued(db):
    waiting_id, _ = await jobs.enqueue(db, "sync", "hook:o/r#2", pr_key="o/r#2", delay_seconds=30)
    running_id, _ = await jobs.enqueue(db, "sync", "hook:o/r#3", pr_key="o/r#3")
    assert (await jobs.claim(db, "w", 60)).id == running_id
    async with db.session() as s:
        created = await jobs.enqueue_per_pr(s, "sync", ["o/r#1", "o/r#2", "o/r#3", "o/r#1"], lambda k: f"poll:{k}:1")
    assert created == 2
    queued = [j for j in await jobs.list_jobs(db) if j.status == "queued"]
    assert sorted((j.pr_key, j.key) for j in queued) == [
        ("o/r#1", "poll:o/r#1:1"), ("o/r#2", "hook:o/r#2"), ("o/r#3", "poll:o/r#3:1")]
    # The sync queued before keeps its time: a poll does not pull forward what a rate limit or a
    # debounce put off.
    assert (await jobs.get_job(db, waiting_id)).run_at > utcnow() + timedelta(seconds=20)
    # The same tick again (same keys) adds nothing; nor does `enqueue_in` while they wait.
    async with db.session() as s:
        assert await jobs.enqueue_per_pr(s, "sync", ["o/r#1", "o/r#3"], lambda k: f"poll:{k}:1") == 0
    assert (await jobs.enqueue(db, "sync", "hook:o/r#1:b", pr_key="o/r#1", same_as=SameWork.PR))[1] is False


async def test_enqueue_per_pr_takes_more_prs_than_one_statement_holds(db):
    keys = [f"o/r#{n}" for n in range(1, jobs.BATCH * 2 + 8)]
    await jobs.enqueue(db, "sync", "hook:o/r#5", pr_key="o/r#5")
    async with db.session() as s:
        assert await jobs.enqueue_per_pr(s, "sync", keys, lambda k: f"poll:{k}") == len(keys) - 1
    queued = [j.pr_key for j in await jobs.list_jobs(db) if j.status == "queued"]
    assert sorted(queued) == sorted(keys)


async def test_a_tick_queues_its_syncs_in_a_fixed_number_of_transactions(db, bare_runtime):
    poller = Poller(bare_runtime())
    counts = []
    enrolled = 0
    for n in (2, 12):
        while enrolled < n:
            await enroll(db, f"o/r#{enrolled + 1}")
            enrolled += 1
        async with db.session() as s:
            await s.exec(update(Job).values(status="done"))
            # At work in a round: the liveness watchdog reads their rounds too, in one session.
            await s.exec(update(PullRequest).values(status="converging"))
        begins = [0]

        def on_begin(_conn, begins=begins) -> None:
            begins[0] += 1

        event.listen(db.engine.sync_engine, "begin", on_begin)
        try:
            await poller.tick()
        finally:
            event.remove(db.engine.sync_engine, "begin", on_begin)
        counts.append((begins[0], poller.queued))
    assert [queued for _, queued in counts] == [2, 12]
    # Six times the PRs, not one transaction more.
    assert counts[0][0] == counts[1][0], counts


# -- the unchanged short-circuit --------------------------------------------------------------


async def _enroll_and_idle(h, *, head: str = "feat") -> str:
    pr = await h.sim.open_pr(REPO, title="t", head=head, author="dev", files={"app/x.py": "x = 1\n"})
    r = await h.http.post("/api/prs", json={"pr": f"{REPO}#{pr.number}"}, headers=AUTH)
    assert r.status_code == 201, r.text
    key = f"{REPO}#{pr.number}"
    await h.wait_status(key, "waiting_review")
    await quiesce(h)
    return key


async def _poll(h) -> dict:
    """One tick and its syncs; the simulator's counts of what they read."""
    h.sim.counters.reset()
    await Poller(h.rt).tick()
    await quiesce(h)
    return h.sim.counters.snapshot()


async def _until_idle(h) -> None:
    # Our own last writes (the review request, the check run) change what the first polls read.
    for _ in range(6):
        await _poll(h)
        # Calm: every request of the tick answered 304 (a write made during it, such as the
        # review request still on its way when the tick read, changes what the next one reads).
        if h.sim.counters.get(status=304) == h.sim.counters.total():
            return
    raise AssertionError(f"never idle: {h.sim.counters.snapshot()}")


async def test_an_unchanged_pr_is_polled_without_writing_its_row(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["noop"]),
                                poller={"interval_seconds": 3600}) as h:
        key = await _enroll_and_idle(h)
        await _until_idle(h)
        before = (await h.view(key)).pr
        writes = []
        original = prs.fenced_update

        async def spy(*a, **kw):
            writes.append(a[1] if len(a) > 1 else kw.get("pr_key"))
            return await original(*a, **kw)

        prs.fenced_update = spy
        try:
            counts = await _poll(h)
        finally:
            prs.fenced_update = original
        after = (await h.view(key)).pr
        assert counts["total"] >= 3 and h.sim.counters.get(status=304) == counts["total"], counts
        # The sync ran (its job is done) and wrote nothing: not even the read time.
        syncs = [j for j in await jobs.list_jobs(h.rt.db, key) if j.kind == "sync"]
        assert syncs and all(j.status == "done" for j in syncs)
        assert writes == []
        assert (after.updated_at, after.synced_at) == (before.updated_at, before.synced_at)
        assert after.model_dump() == before.model_dump()


async def test_a_304_does_not_skip_recording_what_the_row_does_not_hold(tmp_path, db_url):
    """A 304 says "as this process last read it", not "as the row says": another path (a merge
    stage read, a crash between read and write) may have read it without recording it."""
    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["noop"]),
                                poller={"interval_seconds": 3600}) as h:
        key = await _enroll_and_idle(h)
        await _until_idle(h)
        good = (await h.view(key)).pr
        async with h.rt.db.session() as s:
            await s.exec(update(PullRequest).where(PullRequest.pr_key == key).values(title="stale"))
        counts = await _poll(h)
        assert h.sim.counters.get(status=304) == counts["total"], counts
        row = (await h.view(key)).pr
        assert row.title == good.title and row.synced_at > good.synced_at


async def test_an_unchanged_pr_still_escalates_when_its_review_times_out(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["noop"]),
                                poller={"interval_seconds": 3600},
                                convergence={"review_wait_timeout_seconds": 3600,
                                             "nudge_window_seconds": 3600}) as h:
        key = await _enroll_and_idle(h)
        await _until_idle(h)
        # The review has been waited for longer than the timeout: time passed, GitHub did not move.
        async with h.rt.db.session() as s:
            await s.exec(update(PullRequest).where(PullRequest.pr_key == key).values(
                waiting_since=utcnow() - timedelta(hours=2)))
        await _poll(h)
        view = await h.wait_status(key, "escalated", timeout=10)
        assert (await h.escalations(key))[-1].kind == "review_stalled"
        assert view.pr.escalated_at is not None


async def test_an_unchanged_pr_is_still_nudged_when_the_window_passes(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["noop"]),
                                poller={"interval_seconds": 3600},
                                convergence={"review_wait_timeout_seconds": 3600,
                                             "nudge_window_seconds": 3600}) as h:
        key = await _enroll_and_idle(h)
        await _until_idle(h)
        old = utcnow() - timedelta(hours=1, minutes=1)
        async with h.rt.db.session() as s:
            await s.exec(update(PullRequest).where(PullRequest.pr_key == key).values(last_nudge_at=old))
        await _poll(h)
        row = (await h.view(key)).pr
        assert row.last_nudge_at > old + timedelta(minutes=30) and row.last_action == "nudged reviewers"


async def test_a_new_review_on_an_idle_pr_is_read_and_recorded(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["noop"]),
                                poller={"interval_seconds": 3600}) as h:
        h.sim.webhook_faults(drop_all=True)  # only the poll can see it
        key = await _enroll_and_idle(h)
        await _until_idle(h)
        review = await h.sim.submit_review(REPO, int(key.split("#")[1]), user=COPILOT, body="LGTM",
                                           state="COMMENTED")
        await _poll(h)
        assert h.sim.counters.get(status=200) >= 1
        assert (await h.view(key)).pr.latest_review_id == review.id


async def test_the_client_tells_a_304_from_a_fresh_answer_and_a_failed_read(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["noop"]),
                                poller={"interval_seconds": 3600}) as h:
        pr = await h.sim.open_pr(REPO, title="t", head="side", author="dev", files={"s.txt": "s\n"})
        gh = h.rt.github
        with gh.tracking_reads() as first:
            await gh.pull("acme", "app", pr.number)
        with gh.tracking_reads() as again:
            await gh.pull("acme", "app", pr.number)
            await gh.reviews("acme", "app", pr.number)
        assert (first.reads, first.unchanged, first.all_unchanged) == (1, 0, False)
        assert (again.reads, again.unchanged) == (2, 1)  # the reviews were read for the first time
        with gh.tracking_reads() as failing:
            await gh.pull("acme", "app", pr.number)
            try:
                await gh.branch_head("acme", "app", "no-such-branch")
            except Exception:
                pass
        assert (failing.reads, failing.unchanged, failing.all_unchanged) == (2, 1, False)
        with gh.tracking_reads() as none:
            await asyncio.sleep(0)
        assert none.all_unchanged is False


# -- leaving out what a step just read --------------------------------------------------------


async def test_a_tick_leaves_out_a_pr_a_step_read_moments_ago(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["noop"]),
                                poller={"interval_seconds": 3600, "fresh_read_seconds": 30}) as h:
        key = await _enroll_and_idle(h)
        poller = Poller(h.rt)
        # The enrollment's steps read the PR just now: the tick queues no re-read of it.
        assert key in h.rt.read_at
        h.sim.counters.reset()
        await poller.tick()
        await quiesce(h)
        assert (poller.queued, poller.fresh) == (0, 1)
        assert h.sim.counters.get(method="GET", route="/repos/{owner}/{repo}/pulls/{number}") == 0
        # Once that read is older than the window, the tick re-reads the PR, and that read
        # (a step's) counts as fresh for the tick after.
        h.rt.read_at[key] -= 31
        await poller.tick()
        await quiesce(h)
        assert (poller.queued, poller.fresh) == (1, 0)
        assert h.sim.counters.get(method="GET", route="/repos/{owner}/{repo}/pulls/{number}") == 1
        await poller.tick()
        assert (poller.queued, poller.fresh) == (0, 1)


async def test_the_fresh_window_is_at_most_half_a_poll_interval(tmp_path, db_url):
    # A window longer than half the interval would let each poll's own read leave out the next
    # tick: the PR would be re-read every other tick.
    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["noop"]),
                                poller={"interval_seconds": 40, "fresh_read_seconds": 30}) as h:
        key = await _enroll_and_idle(h)
        poller = Poller(h.rt)
        h.rt.read_at[key] -= 21
        await poller.tick()
        assert (poller.queued, poller.fresh) == (1, 0)


async def test_a_tick_leaves_out_a_pr_whose_own_work_is_queued(tmp_path, db_url):
    """A job of the PR queued to run within the interval reads it (or waits ahead of a re-read
    in the queue): no sync for it. One put off beyond the interval (a backoff) does not count."""
    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["noop"]),
                                poller={"interval_seconds": 60, "fresh_read_seconds": 30}) as h:
        key = await _enroll_and_idle(h)
        h.rt.read_at.clear()  # not read lately: only its queued work can leave it out
        poller = Poller(h.rt)
        await jobs.enqueue(h.rt.db, "effect", "later", pr_key=key, delay_seconds=600)
        await poller.tick()
        assert (poller.queued, poller.fresh) == (1, 0)
        await quiesce(h)  # the re-read ran (and read the PR: forget that too)
        h.rt.read_at.clear()
        await jobs.enqueue(h.rt.db, "effect", "soon", pr_key=key, delay_seconds=20)
        await poller.tick()
        assert (poller.queued, poller.fresh) == (0, 1)


async def test_with_fresh_reads_off_a_pr_whose_own_work_is_queued_is_re_read_all_the_same(tmp_path, db_url):
    """`fresh_read_seconds = 0` turns off leaving out a PR for its queued work too: every tick
    re-reads every PR."""
    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["noop"]),
                                poller={"interval_seconds": 60, "fresh_read_seconds": 0}) as h:
        key = await _enroll_and_idle(h)
        poller = Poller(h.rt)
        await jobs.enqueue(h.rt.db, "effect", "soon", pr_key=key, delay_seconds=20)
        h.sim.counters.reset()
        await poller.tick()
        assert (poller.queued, poller.fresh) == (1, 0)
        await quiesce(h)
        assert h.sim.counters.get(method="GET", route="/repos/{owner}/{repo}/pulls/{number}") == 1
