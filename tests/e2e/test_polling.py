"""The poller keeps the truth when webhooks are lost; conditional reads; rate limits per PR."""

from __future__ import annotations

import time
from datetime import timedelta

from bot.fixers import ScriptedFixer
from bot.intake.poller import Poller
from storage import jobs
from storage.models import utcnow

from .harness import COPILOT, REPO, bot_on_simulator, quiesce

AUTH = {"Authorization": "Bearer api-token"}
INTERVAL = 1.0


async def _enroll_by_api(h, number: int) -> str:
    r = await h.http.post("/api/prs", json={"pr": f"{REPO}#{number}"}, headers=AUTH)
    assert r.status_code == 201, r.text
    return f"{REPO}#{number}"


async def _noticed(h, key, what: str, check, started: float) -> float:
    async def seen():
        return check(await h.view(key))

    await h.wait_for(what, seen, timeout=10)
    return time.monotonic() - started


async def test_with_every_webhook_dropped_the_poller_notices_review_push_and_close(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["noop"]),
                                poller={"interval_seconds": INTERVAL}) as h:
        h.sim.webhook_faults(drop_all=True)
        pr = await h.sim.open_pr(REPO, title="t", head="feat", author="dev", files={"app/x.py": "x = 1\n"})
        key = await _enroll_by_api(h, pr.number)
        await h.wait_for("first poll", lambda: _synced(h, key), timeout=10)

        started = time.monotonic()
        sha = await h.sim.push(REPO, "feat", {"app/x.py": "x = 2\n"}, author="dev")
        moved = await _noticed(h, key, "head move", lambda v: v.pr.head_sha == sha, started)

        started = time.monotonic()
        review = await h.sim.submit_review(REPO, pr.number, user=COPILOT, body="one thing",
                                           threads=[{"path": "app/x.py", "line": 1, "body": "rename x"}])
        reviewed = await _noticed(h, key, "new review", lambda v: v.pr.latest_review_id == review.id, started)

        started = time.monotonic()
        await h.sim.close_pr(REPO, pr.number, actor="dev")
        closed = await _noticed(h, key, "close", lambda v: v.derived_status == "abandoned", started)

        # Every webhook of the three changes was dropped: only the poller could have seen them.
        assert h.sim.deliveries and all(d.dropped and not d.attempts for d in h.sim.deliveries)
        # Within a few poll intervals (one, plus the step itself, on an idle machine; a loaded
        # one stretches that, so the bound only says it was a poll and not the slow re-read).
        for took in (moved, reviewed, closed):
            assert took < 5 * INTERVAL, (moved, reviewed, closed)
        print(f"noticed after: push {moved:.2f}s, review {reviewed:.2f}s, close {closed:.2f}s "
              f"(poll interval {INTERVAL}s)")
        assert (await h.view(key)).pr.outcome == "closed without merging"


async def _synced(h, key) -> bool:
    v = await h.view(key)
    return v is not None and v.pr.synced_at is not None


async def test_polling_an_unchanged_pr_again_costs_no_rate_limit(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["noop"]),
                                poller={"interval_seconds": 3600}) as h:
        pr = await h.sim.open_pr(REPO, title="t", head="feat", author="dev", files={"app/x.py": "x = 1\n"})
        key = await _enroll_by_api(h, pr.number)
        await h.wait_status(key, "waiting_review")  # no reviewer answers: it stays there
        poller = Poller(h.rt)
        # Our own last writes (the review request, the check run) wake no sync, so the polls
        # right after them read what changed; within a few polls the PR is unchanged. A tick is
        # calm when every request in it answered 304: a write made during it (the review request
        # may still be on its way when the first tick reads) changes what the next one reads.
        for _ in range(6):
            h.sim.counters.reset()
            await poller.tick()
            await quiesce(h)
            if h.sim.counters.total() and h.sim.counters.get(status=304) == h.sim.counters.total():
                break

        h.sim.counters.reset()
        limit_before = (await h.http_github("/rate_limit"))["resources"]["core"]["remaining"]
        await poller.tick()
        await quiesce(h)
        counts = h.sim.counters.snapshot()
        not_modified = h.sim.counters.get(status=304)
        spent = h.sim.counters.total() - h.sim.counters.get(route="/rate_limit")
        assert spent >= 3 and not_modified == spent, counts
        limit_after = (await h.http_github("/rate_limit"))["resources"]["core"]["remaining"]
        assert limit_after == limit_before


async def test_a_429_on_one_pr_does_not_delay_another(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["noop"]),
                                poller={"interval_seconds": 3600}) as h:
        a = await h.sim.open_pr(REPO, title="a", head="a", author="dev", files={"a.txt": "a\n"})
        b = await h.sim.open_pr(REPO, title="b", head="b", author="dev", files={"b.txt": "b\n"})
        key_a, key_b = await _enroll_by_api(h, a.number), await _enroll_by_api(h, b.number)
        await quiesce(h)
        h.sim.inject_fault(rf"^/repos/acme/app/pulls/{a.number}$", status=429, retry_after=30)
        await jobs.enqueue(h.rt.db, "sync", "sync:a:limited", pr_key=key_a)
        b_job, _ = await jobs.enqueue(h.rt.db, "sync", "sync:b:free", pr_key=key_b)
        h.rt.wake_workers()

        async def b_synced():
            return (await jobs.get_job(h.rt.db, b_job)).status == "done"

        await h.wait_for("PR b synced", b_synced, timeout=20)
        # b went ahead while a waits out its Retry-After (not a worker sleeping on it).
        limited = await jobs.get_job(h.rt.db, (await jobs.enqueue(h.rt.db, "sync", "sync:a:limited"))[0])
        assert limited.status == "queued" and limited.attempts == 0
        assert limited.run_at >= utcnow() + timedelta(seconds=10)


async def test_a_pr_that_does_not_exist_ends_its_run_instead_of_polling_404s(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["noop"]),
                                poller={"interval_seconds": 3600}) as h:
        key = await _enroll_by_api(h, 404)
        view = await h.wait_status(key, "abandoned", timeout=10)
        assert "not found" in view.pr.outcome and view.run_state == "terminated"
