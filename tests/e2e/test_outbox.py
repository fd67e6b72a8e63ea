"""The outbox under lost answers, unreadable heads and stuck rounds: nothing twice, nothing stranded."""

from __future__ import annotations

import asyncio
import json

import pytest
from prometheus_client import REGISTRY
from sqlalchemy import update
from sqlmodel import col, select

from bot.fixers import ScriptedFixer
from storage.models import Job, PullRequest
from tests.serving import CHECK_RUN_SETTLE_SECONDS

from ..helpers import until
from .harness import COPILOT, REPO, bot_on_simulator, open_and_enroll, quiesce, steps

CHECK_RUN_CREATE = r"^(?!/repos/[^/]+/[^/]+/check-runs$)"  # exclude every path but the create


def _ours(sim, kind: str) -> list[dict]:
    return [e for e in sim.effects(kind) if e["actor"] == "convergebot[bot]"]


async def test_a_check_run_whose_create_answer_is_lost_is_found_again_not_duplicated(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["push"])) as h:
        # Every check-run create is done by GitHub and then answered 502.
        h.sim.chaos(7, lost_ack_rate=1.0, exclude=(CHECK_RUN_CREATE,))
        # Each head lives past a check-run update's settle window, so each gets its own create.
        h.sim.set_reviewer(REPO, steps(1, 0, delay=2 * CHECK_RUN_SETTLE_SECONDS))
        key, number = await open_and_enroll(h)
        view = await h.wait_status(key, "merged", timeout=60)
        await quiesce(h)
        created = _ours(h.sim, "check_run_created")
        heads = [e["head_sha"] for e in created]
        assert h.sim.chaos_counts.get("lost_ack", 0) >= 2
        assert len(heads) == len(set(heads)) >= 2, created  # one run per head, however often retried
        assert view.pr.converged_head in heads
        assert h.sim.duplicate_effects() == []


async def test_lost_answers_on_every_kind_of_write_repeat_nothing(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["push"])) as h:
        h.sim.chaos(11, lost_ack_rate=0.5)
        h.sim.set_reviewer(REPO, steps(2, 1, 0))
        key, number = await open_and_enroll(h)
        await h.wait_status(key, "merged", timeout=90)
        await quiesce(h)
        # How many answers were lost varies from run to run: the chaos draws for every request,
        # reads too, and how reads and writes interleave is the machine's (6 to 9 in five runs
        # on a loaded machine, 4 once in the full suite). A floor that says the chaos happened.
        assert h.sim.chaos_counts.get("lost_ack", 0) >= 3
        assert h.sim.duplicate_effects() == []
        assert len(h.sim.effects("merge")) == 1
        assert len(_ours(h.sim, "review_reply")) == 3  # one per thread: 2 + 1
        # One review request per round, whatever the lost answers.
        assert len(h.sim.effects("copilot_review_requested")) == 3


class _PushThenHideTheHead:
    """Pushes, then makes the branch unreadable until a progress-check has failed on it."""

    kind = "fake"

    def __init__(self, h_box: list) -> None:
        self.inner = ScriptedFixer(["push"])
        self.h_box = h_box
        self.hidden = False

    async def run(self, req):
        verdict = await self.inner.run(req)
        if not self.hidden:
            self.hidden = True
            self.h_box[0].sim.inject_fault(r"/git/ref/heads/feat$", status=502)
        return verdict


async def test_a_progress_check_that_cannot_read_the_head_comes_back_instead_of_ending(tmp_path, db_url):
    box: list = [None]
    async with bot_on_simulator(tmp_path, db_url, fixer=_PushThenHideTheHead(box)) as h:
        box[0] = h
        h.sim.set_reviewer(REPO, steps(1, 0))
        key, _ = await open_and_enroll(h)

        async def failed_check():
            async with h.rt.db.session() as s:
                return (await s.exec(select(Job).where(
                    Job.kind == "progress_check", Job.last_error.contains("head unreadable")))).first()

        failed = await h.wait_for("a progress-check to fail on the hidden head", failed_check)
        # Retried with backoff (queued, or already running again), neither done nor given up.
        assert failed.status in ("queued", "running") and failed.attempts >= 1, failed
        h.sim.clear_faults()
        # The fixer's deadline is 80 s away: only the retried check can move the round on.
        view = await h.wait_status(key, "merged", timeout=30)
        assert [r.status for r in await h.rounds(key)] == ["addressed", "converged"]
        assert view.pr.current_round == 2


class _HangOnce:
    """The first run hangs until cancelled; later runs push."""

    kind = "fake"

    def __init__(self) -> None:
        self.inner = ScriptedFixer(["push"])
        self.started = asyncio.Event()
        self.runs = 0

    async def run(self, req):
        self.runs += 1
        if self.runs == 1:
            self.started.set()
            await asyncio.Event().wait()
        return await self.inner.run(req)


def _healed() -> float:
    return REGISTRY.get_sample_value("convergebot_liveness_healed_total") or 0.0


async def test_the_watchdog_heals_a_round_whose_every_job_gave_up(tmp_path, db_url):
    fixer = _HangOnce()
    async with bot_on_simulator(tmp_path, db_url, fixer=fixer, poller={"interval_seconds": 0.5},
                                jobs={"lease_seconds": 1.5}) as h:
        h.sim.set_reviewer(REPO, steps(1, 0))
        key, _ = await open_and_enroll(h)
        await asyncio.wait_for(fixer.started.wait(), 30)
        before = _healed()
        # The fixer's job and its deadline check both give up (as after many failures): nothing
        # is left that would ever close round 1, and the step only waits for the fixer.
        async with h.rt.db.session() as s:
            await s.exec(update(Job).where(Job.pr_key == key, Job.kind.in_(("fix", "progress_check")))
                         .values(status="failed", lease_owner=None))
        view = await h.wait_status(key, "merged", timeout=30)
        assert _healed() - before >= 1
        assert view.pr.husk_retries == 0 and [r.status for r in await h.rounds(key)] == ["addressed", "converged"]


async def test_two_check_run_updates_at_once_make_one_run(tmp_path, db_url):
    from bot.effects import check_run

    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["push"]),
                                poller={"interval_seconds": 3600}) as h:
        key, _ = await open_and_enroll(h)  # no reviewer: the PR waits for a review
        await h.wait_status(key, "waiting_review")
        await quiesce(h)
        # As if two workers ran two updates for a head nothing was said about yet (a commit the
        # bot itself never publishes on, so only these two calls can create a run there).
        head = await h.rt.github.branch_head("acme", "app", "main")
        async with h.rt.db.session() as s:
            await s.exec(update(PullRequest).where(PullRequest.pr_key == key).values(
                check_run_id=None, check_run_head=None, head_sha=head))
        h.rt.check_runs.clear()
        # Slow creates, so both are in flight together unless something serializes them.
        h.sim.inject_fault(r"/check-runs$", method="POST", delay=0.5, count=2)
        await asyncio.gather(check_run.write_run(h.rt, key), check_run.write_run(h.rt, key))
        created = [e for e in _ours(h.sim, "check_run_created") if e["head_sha"] == head]
        assert len(created) == 1, created


async def test_a_retried_review_request_does_not_ask_a_reviewer_who_answered_since(tmp_path, db_url):
    """The request was made, its answer lost, and the reviewer answered before the retry: the
    retry reads the review and asks nobody (order fixed by the test, not by timing)."""
    from datetime import timedelta

    from bot.effects.runner import run_effect
    from storage.models import utcnow

    async with bot_on_simulator(tmp_path, db_url) as h:
        pr = await h.sim.open_pr(REPO, title="Change", head="feat", author="dev",
                                 files={"app/core.py": "def f():\n    return 2\n"})
        repo, sim_pr = h.sim.pr(REPO, pr.number)
        head = await h.sim.head_sha(repo, sim_pr)
        decided = utcnow() - timedelta(seconds=5)
        await h.sim.submit_review(REPO, pr.number, user=COPILOT, body="looks fine", commit_id=head)
        job = Job(kind="effect", pr_key=f"{REPO}#{pr.number}", key="retried-request", status="running",
                  run_at=decided, created_at=decided, attempts=2,
                  payload=json.dumps({"effect": "request_review", "head": head}))
        await run_effect(h.rt, job)
        assert h.sim.effects("copilot_review_requested") == []
        assert h.sim.effects("review_requested") == []
        # A review of another head does not count: the same retry then asks.
        job.payload = json.dumps({"effect": "request_review", "head": "0" * 40})
        await run_effect(h.rt, job)
        assert len(h.sim.effects("copilot_review_requested")) == 1


async def test_a_first_review_request_asks_without_looking_only_while_its_decision_is_fresh(tmp_path, db_url,
                                                                                         monkeypatch):
    """A decision that knew every review of the head moments ago: its first try asks at once,
    no read of the reviews. A decision that cannot say, one over 30 s old (a rate limit put it
    off), and a try after a cancelled one all look first."""
    from datetime import timedelta

    from bot.effects.review_request import REVIEW_LOOK_AFTER
    from bot.effects.runner import run_effect
    from storage.models import utcnow

    def review_reads(what: str = "reviews") -> int:
        return sum(1 for method, path, _ in h.sim.counters.recent
                   if method == "GET" and path.endswith(f"/pulls/{pr.number}/{what}"))

    async def request(known_at, decided=None, on=None, **fields) -> None:
        payload = {"effect": "request_review", "head": on or head}
        if known_at is not None:
            payload["reviews_known_at"] = known_at.isoformat()
        decided = decided or utcnow()
        await run_effect(h.rt, Job(kind="effect", pr_key=f"{REPO}#{pr.number}", key="rr", status="running",
                                   run_at=decided, created_at=decided, payload=json.dumps(payload),
                                   **({"attempts": 1} | fields)))

    # The decisions below, some made seconds ago, are this process's: its memory holds them
    # (run first in a process, the module's import would be later than the oldest).
    from bot.engine import outbox

    monkeypatch.setattr(outbox.MEMORY, "since", utcnow() - 3 * REVIEW_LOOK_AFTER)
    async with bot_on_simulator(tmp_path, db_url) as h:
        pr = await h.sim.open_pr(REPO, title="Change", head="feat", author="dev",
                                 files={"app/core.py": "def f():\n    return 2\n"})
        repo, sim_pr = h.sim.pr(REPO, pr.number)
        head = await h.sim.head_sha(repo, sim_pr)
        h.sim.counters.reset()
        await request(utcnow())
        assert review_reads() == 0 and len(h.sim.effects("copilot_review_requested")) == 1
        # Nor does it read who is requested: nothing of this request can be pending yet.
        assert review_reads("requested_reviewers") == 0

        # Decided before Copilot reviewed the head: each of these looks, finds the review, and
        # asks nobody. (GitHub stamps reviews to the second: the decision is well before.)
        decided = utcnow() - timedelta(seconds=5)
        await h.sim.submit_review(REPO, pr.number, user=COPILOT, body="looks fine", commit_id=head)
        await request(None, decided)
        await request(decided - REVIEW_LOOK_AFTER, decided)
        await request(decided, decided, last_error="cancelled")
        assert review_reads() == 3 and len(h.sim.effects("copilot_review_requested")) == 1
        # The try after a cancelled one read who is requested too, before the reviews (a review
        # landing between the two reads then shows in the second).
        assert review_reads("requested_reviewers") == 1
        # A retry for a head not reviewed yet looks at who is requested, and finds Copilot
        # asked already (by the try whose answer was lost).
        await h.sim.request_copilot_review(REPO, pr.number, actor="someone")
        await request(utcnow(), on="0" * 40, last_error="502 after the write")
        assert review_reads("requested_reviewers") == 2
        assert len(h.sim.effects("copilot_review_requested")) == 1  # the retry asked nobody


ASKS = ScriptedFixer(["ask:which way?"])  # answers no thread: the bot itself queues no reply


async def _round_with_threads(h, n_threads: int):
    """Round 1 of a PR got a review with `n_threads` threads, and its fixer asked a question
    (the PR is escalated, and quiet): its key, number, process key, and the threads as a
    round's read sees them (`thread_of`)."""
    from bot.engine.read import thread_of

    key, number = await open_and_enroll(h)  # no reviewer: the PR waits for a review
    await h.wait_status(key, "waiting_review")
    await h.sim.submit_review(REPO, number, user=COPILOT,
                              threads=[{"path": "app/core.py", "line": 1, "body": f"x{i}?"} for i in range(n_threads)])
    await h.wait_status(key, "escalated")
    await quiesce(h)
    view = await h.view(key)
    assert view.pr.current_round == 1
    threads = [thread_of(t) for t in await h.rt.github.review_threads("acme", "app", number)]
    return key, number, view.pr.process_key, threads


async def _reply_effect(h, key: str, pk: str, threads, tag: str, *, attempts: int = 1, last_error=None):
    """Queue this round's reply effect for `threads` as the fixer would, and run it once."""
    from datetime import timedelta

    from bot.effects.runner import run_effect
    from bot.engine import outbox
    from bot.rules.findings import from_threads
    from storage import jobs
    from storage.models import utcnow

    async with h.rt.db.session() as s:
        await outbox.replies(s, key, pk, [(f, f"Fixed ({tag}).", True) for f in from_threads(tuple(threads))],
                             key=f"1:{tag}", round_no=1)
        # Held by "another worker" for an hour: only this test runs it.
        await s.exec(update(Job).where(Job.key == f"fx:reply:{pk}:1:{tag}").values(
            status="running", lease_owner="elsewhere", lease_until=utcnow() + timedelta(hours=1)))
    job = next(j for j in await jobs.list_jobs(h.rt.db, key) if j.key == f"fx:reply:{pk}:1:{tag}")
    job.attempts, job.last_error = attempts, last_error
    await run_effect(h.rt, job)


def _graphql(h) -> int:
    return sum(1 for method, path, _ in h.sim.counters.recent if method == "POST" and path == "/graphql")


def _ours_on(h, thread_id: str) -> int:
    from bot.engine.outbox import reply_marker

    return sum(1 for e in h.sim.effects("review_reply") if reply_marker(thread_id) in (e.get("body") or ""))


async def test_a_round_s_first_reply_writes_from_the_round_s_read_without_reading_again(tmp_path, db_url):
    """The round read the threads after our last replies were done: its reply effect writes
    from that read (one GraphQL request, the write). A thread it saw our reply on is only
    resolved. A retry reads first."""
    from bot.engine.outbox import reply_marker
    from bot.github.endpoints.reviews import ThreadWrite

    async with bot_on_simulator(tmp_path, db_url, fixer=ASKS, poller={"interval_seconds": 3600}) as h:
        key, number, pk, _ = await _round_with_threads(h, 2)
        first = (await h.rt.github.review_threads("acme", "app", number))[0]["id"]
        # An earlier round's reply of ours is on the first thread, left open for a maintainer.
        await h.rt.github.write_threads([ThreadWrite(first, f"Needs a maintainer.\n\n{reply_marker(first)}", False)])
        from bot.engine.read import thread_of

        threads = [thread_of(t) for t in await h.rt.github.review_threads("acme", "app", number)]
        assert [t.replied for t in threads] == [True, False]
        h.sim.counters.reset()
        await _reply_effect(h, key, pk, threads, "a")
        assert _graphql(h) == 1  # the write alone
        assert [_ours_on(h, t.id) for t in threads] == [1, 1]
        state = {t["id"]: t["isResolved"] for t in await h.rt.github.review_threads("acme", "app", number)}
        assert all(state.values())

        # The same effect's retry (its answer lost), or its try after one cancelled mid-write
        # (a cancel gives the attempt back): each reads, finds both done, writes nothing.
        for retry in ({"attempts": 2}, {"attempts": 1, "last_error": "cancelled"}):
            h.sim.counters.reset()
            await _reply_effect(h, key, pk, threads, "a", **retry)
            assert _graphql(h) == 1  # the read alone
            assert [_ours_on(h, t.id) for t in threads] == [1, 1]


async def test_a_reply_queued_since_the_round_s_read_makes_the_next_one_read_first(tmp_path, db_url):
    """Two fixer attempts of one round reply to the same thread from the same read: the second
    one must see the first one's reply, so it reads before writing and posts nothing twice."""
    async with bot_on_simulator(tmp_path, db_url, fixer=ASKS, poller={"interval_seconds": 3600}) as h:
        key, number, pk, threads = await _round_with_threads(h, 1)
        await _reply_effect(h, key, pk, threads, "attempt-1")
        h.sim.counters.reset()
        await _reply_effect(h, key, pk, threads, "attempt-2")
        assert _graphql(h) == 1  # the read; nothing left to write
        assert _ours_on(h, threads[0].id) == 1


async def test_a_thread_whose_first_comment_has_no_id_is_replied_to_and_resolved_once(tmp_path, db_url):
    """GitHub may send no id for a thread's first comment: the reply names the thread alone, so
    the thread still gets it (left open, the next round would take it up again), and a retry
    finds our marker and posts nothing twice."""
    from dataclasses import replace

    async with bot_on_simulator(tmp_path, db_url, fixer=ASKS, poller={"interval_seconds": 3600}) as h:
        key, number, pk, threads = await _round_with_threads(h, 1)
        unknown = [replace(t, comment_id=None) for t in threads]
        await _reply_effect(h, key, pk, unknown, "a")
        await _reply_effect(h, key, pk, unknown, "a", attempts=2)
        assert _ours_on(h, threads[0].id) == 1
        (thread,) = await h.rt.github.review_threads("acme", "app", number)
        assert thread["isResolved"]


async def test_a_review_that_comes_while_our_replies_are_queued_is_taken_up_once_they_are_posted(tmp_path, db_url):
    from datetime import timedelta

    from storage import jobs
    from storage.models import utcnow

    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["push"]),
                                poller={"interval_seconds": 3600}) as h:
        h.sim.set_reviewer(REPO, steps(0))  # a clean review as soon as one is asked for
        pr = await h.sim.open_pr(REPO, title="t", head="feat", author="dev", files={"app/core.py": "x = 2\n"})
        key = f"{REPO}#{pr.number}"
        # Replies of ours still being posted (a worker elsewhere holds the job's lease for an
        # hour): the clean review must wait.
        async with h.rt.db.session() as s:
            held, _ = await jobs.enqueue_in(s, h.rt.db.is_postgres, "effect", "fx:reply:held", pr_key=key,
                                            payload={"effect": "reply", "replies": []})
            await s.exec(update(Job).where(Job.id == held).values(
                status="running", lease_owner="elsewhere", lease_until=utcnow() + timedelta(hours=1)))
        await h.sim.comment(REPO, pr.number, "/converge", user="maint")

        async def waited():
            views = await h.view(key)
            queued = [j for j in await jobs.list_jobs(h.rt.db, key)
                      if j.kind == "sync" and ":settling:" in j.key and j.status == "queued"]
            return views is not None and views.pr.latest_review_id is not None and queued

        await h.wait_for("the step to wait for the replies and come back", waited)
        assert (await h.view(key)).pr.status == "waiting_review"
        # The replies go out; their webhooks wake nothing, and the poller sleeps for an hour:
        # the step that waited comes back by itself and the PR converges and merges.
        async with h.rt.db.session() as s:
            await s.exec(update(Job).where(Job.id == held).values(status="done", lease_owner=None,
                                                                   finished_at=utcnow()))
        await h.wait_status(key, "merged", timeout=30)


@pytest.mark.parametrize("hold", [60.0, 0.0])
async def test_a_check_run_update_waits_while_the_pr_has_other_work_in_hand(tmp_path, db_url, hold):
    """The converged PR's merge takes longer than the check run's settle window: held, the run
    goes straight to "merged"; with the hold off (the control) it says "merging" (or "waiting
    merge") on the way, one write more."""
    # No poll ticks (every 2 s here): with every read of the PR slow (below), their syncs would
    # take every worker, and the update would wait for one, not for the hold.
    async with bot_on_simulator(tmp_path, db_url, github={"check_run_hold_seconds": hold},
                                poller={"interval_seconds": 3600}) as h:
        h.sim.set_reviewer(REPO, steps(0))
        # The merge is slow: in hand well past the settle window of the update that says so.
        # Slow in its re-read of the PR, before it takes the PR's lock for the PUT: an update
        # that found the lock taken would wait for the merge and say "merged" either way. (Every
        # read of the PR is slowed, the merge's among them: nothing tells them apart.)
        h.sim.inject_fault(r"/pulls/\d+$", method="GET", delay=3 * CHECK_RUN_SETTLE_SECONDS)
        key, _ = await open_and_enroll(h)
        view = await h.wait_status(key, "merged", timeout=60)
        head = view.pr.converged_head

        def said() -> list[str]:
            return [e["output"]["title"].split(" · ")[0]
                    for e in _ours(h.sim, "check_run_created") + _ours(h.sim, "check_run_updated")
                    if e["head_sha"] == head]

        async def says_merged() -> bool:
            return said()[-1:] == ["merged"]

        # Held, the last update waits a little longer than the merge's sync.
        await h.wait_for("the run to say merged", says_merged)
        await quiesce(h)
        on_the_way = {"waiting merge", "merging"} & set(said())
        assert bool(on_the_way) == (not hold), said()


class _FixerAfterTheUpdate:
    """The scripted fixer, pushing only once the check run update the round's start queued has
    been written on the head it leaves (`hold` 0) or put off as held (else): five settle windows
    of work were a guess of when that happens, too short on a loaded machine."""

    kind = "fake"

    def __init__(self, hold: float) -> None:
        self.inner, self.hold = ScriptedFixer(["push"]), hold
        self.h = None  # the harness, once it is up

    async def run(self, req):
        await until("the round's check run update written or held", lambda: self._update_done(req))
        return await self.inner.run(req)

    async def _update_done(self, req) -> bool:
        if not self.hold:
            return any(e["head_sha"] == req.entry_head and e["output"]["title"].startswith("converging")
                       for e in _ours(self.h.sim, "check_run_created") + _ours(self.h.sim, "check_run_updated"))
        async with self.h.rt.db.read_session() as s:
            return bool((await s.exec(select(Job.id).where(
                Job.pr_key == req.pr_key, col(Job.key).startswith("fx:check_run:"),
                Job.status == "queued", col(Job.last_error).contains("check run held")))).all())


@pytest.mark.parametrize("hold", [60.0, 0.0])
async def test_a_check_run_update_waits_while_the_fixer_works(tmp_path, db_url, hold):
    """The round's fixer works until the check run update its round queued is held or written,
    then pushes. Held, the head it leaves keeps what its run said first ("waiting review"), and
    the next head gets its own run; with the fix hold off (the control) the head it left says
    "converging" on the way, one write more."""
    fixer = _FixerAfterTheUpdate(hold)
    async with bot_on_simulator(tmp_path, db_url, fixer=fixer, github={"check_run_fix_hold_seconds": hold},
                                poller={"interval_seconds": 3600}) as h:
        fixer.h = h
        # Each review comes past the settle window: each head's run is made before it.
        h.sim.set_reviewer(REPO, steps(1, 0, delay=2 * CHECK_RUN_SETTLE_SECONDS))
        key, _ = await open_and_enroll(h)
        view = await h.wait_status(key, "merged", timeout=60)
        await quiesce(h)
        created = _ours(h.sim, "check_run_created")
        updated = _ours(h.sim, "check_run_updated")
        first = created[0]["head_sha"]
        said_first = [e["output"]["title"].split(" · ")[0] for e in created + updated if e["head_sha"] == first]
        assert first != view.pr.converged_head, created
        assert len(created) == len({e["head_sha"] for e in created}) == 2, created  # one run per head
        assert ("converging" in said_first) == (not hold), said_first


async def _none_of_its_own_in_hand(h, key: str) -> bool:
    """Put off the bot's queued jobs of the PR; whether none is running (on a loaded machine a
    sync can still come after `quiesce`). Waited for, it leaves only the jobs a test makes."""
    from datetime import timedelta

    from storage.models import utcnow

    async with h.rt.db.session() as s:
        await s.exec(update(Job).where(Job.pr_key == key, Job.status == "queued").values(
            run_at=utcnow() + timedelta(hours=1)))
        return not (await s.exec(select(Job.id).where(Job.pr_key == key, Job.status == "running"))).all()


async def _running_elsewhere(h, *ids: int) -> None:
    """Mark jobs as under way on "another worker": none of this process's workers runs them."""
    from datetime import timedelta

    from storage.models import utcnow

    async with h.rt.db.session() as s:
        await s.exec(update(Job).where(Job.id.in_(ids)).values(
            status="running", lease_owner="elsewhere", lease_until=utcnow() + timedelta(hours=1)))


async def test_two_updates_of_one_check_run_do_not_hold_each_other(tmp_path, db_url):
    """An update queued while another ran (a publish finds none queued) is not the PR's other
    work: each renders the same row, and holding each other they waited out the whole hold."""
    from bot.effects import check_run
    from bot.engine import outbox
    from bot.runtime.workers import Reschedule
    from storage import jobs

    # No poll ticks (every 2 s here): each would queue the PR's sync.
    async with bot_on_simulator(tmp_path, db_url, poller={"interval_seconds": 3600}) as h:
        key, _ = await open_and_enroll(h)  # no reviewer: the PR waits for a review
        await h.wait_status(key, "waiting_review")
        await quiesce(h)
        await h.wait_for("the PR's own work put off or ended", lambda: _none_of_its_own_in_hand(h, key))
        # On the way to the merge (what holds an update), as if a clean review had come.
        async with h.rt.db.session() as s:
            await s.exec(update(PullRequest).where(PullRequest.pr_key == key).values(status="waiting_merge"))
        # Two updates under way (only this test runs them).
        async with h.rt.db.session() as s:
            for tag in ("mine", "other"):
                await outbox.add(s, "check_run", f"{key}:{tag}", pr_key=key, delay_seconds=3600)
        updates = {j.key: j for j in await jobs.list_jobs(h.rt.db, key) if j.key.startswith("fx:check_run:")}
        await _running_elsewhere(h, *(j.id for j in updates.values()))
        mine = updates[f"fx:check_run:{key}:mine"]
        assert await check_run.hold(h.rt, mine, await h.view(key))  # looked; not held by the other update
        # Another kind of work of the PR, under way, holds it. (A sync queued for the PR, put off
        # above, takes this one in: the id is the one queued.)
        sync_id, _ = await jobs.enqueue(h.rt.db, "sync", f"sync:{key}:test", pr_key=key, delay_seconds=3600)
        await _running_elsewhere(h, sync_id)
        with pytest.raises(Reschedule):
            await check_run.hold(h.rt, mine, await h.view(key))
        # A round's stages are not held.
        async with h.rt.db.session() as s:
            await s.exec(update(PullRequest).where(PullRequest.pr_key == key).values(status="waiting_review"))
        assert not await check_run.hold(h.rt, mine, await h.view(key))


async def test_an_update_that_finds_the_merge_ended_renders_the_row_the_merge_left(tmp_path, db_url, monkeypatch):
    """The update read the row ("merging"), and the merge ended before the update looked for
    other work in hand. The merge wrote "merged" before its job ended, so the update reads the
    row again after the look and says merged: the row it read first would have said "merging",
    a write more, and the last one until the next update came."""
    from bot.effects import check_run
    from bot.engine import outbox
    from storage import jobs
    from storage.models import utcnow

    # No poll ticks (every 2 s here): each would queue the PR's sync.
    async with bot_on_simulator(tmp_path, db_url, poller={"interval_seconds": 3600}) as h:
        key, _ = await open_and_enroll(h)  # no reviewer: the PR waits for a review
        view = await h.wait_status(key, "waiting_review")
        await quiesce(h)
        await h.wait_for("the PR's own work put off or ended", lambda: _none_of_its_own_in_hand(h, key))
        # Merging, the merge under way; an update of the check run (only this test runs them).
        async with h.rt.db.session() as s:
            await s.exec(update(PullRequest).where(PullRequest.pr_key == key).values(status="merging"))
            await outbox.add(s, "check_run", f"{key}:mine", pr_key=key, delay_seconds=3600)
        merge_id, _ = await jobs.enqueue(h.rt.db, "effect", f"test-merge:{key}", pr_key=key, delay_seconds=3600)
        [mine] = [j for j in await jobs.list_jobs(h.rt.db, key) if j.key == f"fx:check_run:{key}:mine"]
        await _running_elsewhere(h, merge_id, mine.id)
        look = jobs.in_hand

        async def the_merge_ends_first(*args, **kwargs):
            # Between the update's read of the row and its look: the merge records the merge
            # and then ends, as `merge.run_merge` and its job do.
            async with h.rt.db.session() as s:
                await s.exec(update(PullRequest).where(PullRequest.pr_key == key).values(
                    status="merged", merged_at=utcnow()))
            async with h.rt.db.session() as s:
                await s.exec(update(Job).where(Job.id == merge_id).values(status="done", lease_owner=None))
            return await look(*args, **kwargs)

        monkeypatch.setattr(jobs, "in_hand", the_merge_ends_first)
        await check_run.write_run(h.rt, key, mine)
        said = [e["output"]["title"].split(" · ")[0]
                for e in _ours(h.sim, "check_run_created") + _ours(h.sim, "check_run_updated")
                if e["head_sha"] == view.pr.head_sha]
        assert said[-1] == "merged", said
