"""The looks the outbox's effects take before they write to GitHub: which reviews answer a review
request, when a check-run update writes, when a reply reads the threads first."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from sqlalchemy import update
from sqlmodel import select

from bot.effects import check_run
from bot.effects.runner import run_effect
from bot.engine import outbox
from bot.intake.poller import Poller
from bot.runtime.workers import Reschedule
from storage import backup, jobs, rounds
from storage.keys import PrKey, parse_pr_key
from storage.models import Job, PullRequest, Round, utcnow

from ..helpers import finish
from .harness import COPILOT, REPO, bot_on_simulator, open_and_enroll, quiesce
from .test_outbox import (
    ASKS,
    _graphql,
    _none_of_its_own_in_hand,
    _ours,
    _ours_on,
    _reply_effect,
    _round_with_threads,
    _running_elsewhere,
)

# -- review requests: which reviews answer one ------------------------------------------------


async def _reviewed_pr(h, branch: str, *, ago: timedelta = timedelta(0)) -> tuple[int, str, int]:
    """A PR (not enrolled: only the test asks for its reviews) whose head Copilot reviewed `ago`
    ago: its number, head and the review's id."""
    pr = await h.sim.open_pr(REPO, title=branch, head=branch, author="dev",
                             files={f"app/{branch}.py": "def f():\n    return 2\n"})
    repo, sim_pr = h.sim.pr(REPO, pr.number)
    head = await h.sim.head_sha(repo, sim_pr)
    review = await h.sim.submit_review(REPO, pr.number, user=COPILOT, body="looks fine", commit_id=head)
    review.submitted_at -= ago
    return pr.number, head, review.id


async def _asks_copilot(h, number: int, head: str, *, decided, attempts: int = 2, **payload) -> bool:
    """Run a review request for `head` decided at `decided` (a retry unless `attempts` is 1):
    whether it asked Copilot."""
    before = len(h.sim.effects("copilot_review_requested"))
    await run_effect(h.rt, Job(kind="effect", pr_key=f"{REPO}#{number}", key=f"rr-{number}", status="running",
                               run_at=decided, created_at=decided, attempts=attempts,
                               payload=json.dumps({"effect": "request_review", "head": head, **payload})))
    return len(h.sim.effects("copilot_review_requested")) > before


async def test_a_review_counts_as_answering_a_request_by_the_decision_s_newest_review_id(tmp_path, db_url):
    """With the decision's newest review id (`baseline`), that id decides, not the time: a review
    past it stamped before the request was queued (submitted between the decision's read and its
    commit, or GitHub's clock behind ours) answers it; one the decision knew does not."""
    async with bot_on_simulator(tmp_path, db_url, poller={"interval_seconds": 3600}) as h:
        number, head, review = await _reviewed_pr(h, "past-baseline", ago=timedelta(seconds=10))
        assert not await _asks_copilot(h, number, head, decided=utcnow(), baseline=review - 1)
        number, head, review = await _reviewed_pr(h, "known")
        assert await _asks_copilot(h, number, head, decided=utcnow() - timedelta(minutes=1), baseline=review)


async def test_without_a_baseline_only_a_review_since_the_decision_answers_the_request(tmp_path, db_url):
    """A decision that knew no review id goes by the time: a review of the head from before the
    decision is not an answer to it, and the reviewer is asked."""
    async with bot_on_simulator(tmp_path, db_url, poller={"interval_seconds": 3600}) as h:
        number, head, _ = await _reviewed_pr(h, "before", ago=timedelta(minutes=10))
        assert await _asks_copilot(h, number, head, decided=utcnow(), baseline=None)
        number, head, _ = await _reviewed_pr(h, "since")
        assert not await _asks_copilot(h, number, head, decided=utcnow() - timedelta(minutes=1), baseline=None)


async def test_on_a_restored_backup_a_review_since_the_backup_answers_a_request_the_database_forgot(
        tmp_path, db_url, monkeypatch):
    """On a restored backup, a review of the head submitted after the backup was taken answers a
    request the database no longer remembers making, even one the decision knew of (the row's
    newest review id): asked again, the reviewer would review the head a second time. A review
    from before the backup is no such answer: the reviewer is asked."""
    async with bot_on_simulator(tmp_path, db_url, poller={"interval_seconds": 3600}) as h:
        number, head, review = await _reviewed_pr(h, "after-backup")
        _as_restored(monkeypatch)
        assert not await _asks_copilot(h, number, head, decided=utcnow(), attempts=1, baseline=review)

        number, head, review = await _reviewed_pr(h, "before-backup", ago=timedelta(minutes=10))
        assert await _asks_copilot(h, number, head, decided=utcnow(), attempts=1, baseline=review)


def _as_restored(monkeypatch) -> None:
    """This process on a database restored from a backup taken 5 minutes ago, for the test: what
    a poller's settling would change (the restore, `since`) is put back after it."""
    now = utcnow()
    monkeypatch.setattr(outbox.MEMORY, "restore", backup.Restored(now - timedelta(minutes=5), now))
    monkeypatch.setattr(outbox.MEMORY, "since", outbox.MEMORY.since)


async def _restored_with_rounds(h, monkeypatch, number: int, decided: list[tuple[str, int]]) -> tuple[PrKey, str]:
    """A database restored from a backup taken 5 minutes ago, holding a run whose rounds 1, 2, …
    began on these heads and were decided on these review ids: the PR's key and the run's."""
    _as_restored(monkeypatch)
    key, pk = parse_pr_key(f"{REPO}#{number}"), "run-restored"
    async with h.rt.db.session() as s:
        for n, (head, review) in enumerate(decided, start=1):
            await rounds.start(s, key, pk, n, head)
            assert await rounds.update_round(s, key, pk, n, {"review_id": review, "status": "addressed"})
    return key, pk


async def _asks_on_restore(h, key: PrKey, pk: str, head: str, round_no: int, baseline: int) -> bool:
    """Run the run's review request of `round_no` for `head` (a first try): whether it asked Copilot."""
    before, now = len(h.sim.effects("copilot_review_requested")), utcnow()
    await run_effect(h.rt, Job(kind="effect", pr_key=str(key), key=f"rr-{key.number}-{round_no}", status="running",
                               run_at=now, created_at=now, attempts=1, process_key=pk,
                               payload=json.dumps({"effect": "request_review", "head": head, "round": round_no,
                                                   "baseline": baseline})))
    return len(h.sim.effects("copilot_review_requested")) > before


async def test_on_a_restored_backup_a_review_a_round_already_decided_on_answers_no_new_request(
        tmp_path, db_url, monkeypatch):
    """A round of the run decided on a review of this head given after the backup (the run's
    next round starts on the same head: every finding answered without a commit): that review
    answers no request of the new round, whose wait passes it over (`decide.fresh_reviews`);
    taken for an answer, nobody would be asked and the round would wait for ever."""
    async with bot_on_simulator(tmp_path, db_url, poller={"interval_seconds": 3600}) as h:
        number, head, review = await _reviewed_pr(h, "used-after-backup")
        key, pk = await _restored_with_rounds(h, monkeypatch, number, [(head, review)])
        assert await _asks_on_restore(h, key, pk, head, 2, baseline=review), "the round's reviewer was asked"


async def test_on_a_restored_backup_only_the_rounds_on_this_head_say_which_reviews_were_used(
        tmp_path, db_url, monkeypatch):
    """The rounds that used a review are those begun on the head asked about, as the round's wait
    counts them: a later round on another head, decided on a newer review, does not make this
    head's second review since the backup (unused) old, and nobody is asked for a third."""
    async with bot_on_simulator(tmp_path, db_url, poller={"interval_seconds": 3600}) as h:
        number, head, first = await _reviewed_pr(h, "back-to-an-old-head")
        second = (await h.sim.submit_review(REPO, number, user=COPILOT, body="again", commit_id=head)).id
        # Round 2 on another head, decided on a newer review than this head's second.
        key, pk = await _restored_with_rounds(h, monkeypatch, number, [(head, first), ("f" * 40, second + 1000)])
        assert not await _asks_on_restore(h, key, pk, head, 3, baseline=second + 1000), "the unused review answered"


async def test_a_restore_settles_after_a_scan_of_this_process_and_then_trusts_only_jobs_decided_since(
        tmp_path, db_url, monkeypatch):
    """The poller trusts the database's memory again once the restore has caught up, and not
    before a scan begun in this process has read every repository: a PR enrolled after the
    backup was taken is one the restored database does not know, and the scan finds it again.
    A job decided while the bot still looked (the scan's, from the restored memory) looks when
    it runs after that; one decided after it is a first try."""
    async with bot_on_simulator(tmp_path, db_url, poller={"interval_seconds": 3600}) as h:
        _as_restored(monkeypatch)
        monkeypatch.setattr(h.rt, "scan_started_at", None)
        poller = Poller(h.rt)
        await poller.tick()
        assert outbox.MEMORY.restored, "settled before any scan of this process"
        decided_while_restored = _first_claim(utcnow())
        h.rt.scan_started_at = time.monotonic()
        await poller.tick()
        assert not outbox.MEMORY.restored, "nothing active is behind: settled"
        assert not outbox.first_try(decided_while_restored)
        assert outbox.first_try(_first_claim(utcnow()))


def _first_claim(decided) -> Job:
    return Job(kind="effect", key="k", attempts=1, created_at=decided, run_at=decided)


async def test_a_nudge_asks_again_but_never_posts_a_comment_reviewer_s_trigger_again(tmp_path, db_url):
    """A comment-triggered bot is asked once a round: the round's request posts its trigger, a
    nudge of the same round (a job of its own, so a marker of its own) posts none."""
    rabbit = {"login": "coderabbitai[bot]", "kind": "comment", "trigger": "@coderabbitai review"}
    async with bot_on_simulator(tmp_path, db_url, poller={"interval_seconds": 3600},
                                convergence={"reviewer": [rabbit]}) as h:
        pr = await h.sim.open_pr(REPO, title="Change", head="feat", author="dev",
                                 files={"app/core.py": "def f():\n    return 2\n"})
        repo, sim_pr = h.sim.pr(REPO, pr.number)
        head = await h.sim.head_sha(repo, sim_pr)

        def triggers() -> int:
            return sum(1 for c in h.sim.state.issue_comments.values()
                       if c.number == pr.number and "convergebot:trigger" in c.body)

        for key, nudge in (("start", False), ("nudge", True)):
            decided = utcnow()
            await run_effect(h.rt, Job(kind="effect", pr_key=f"{REPO}#{pr.number}", key=key, status="running",
                                       run_at=decided, created_at=decided, attempts=1, process_key="p1",
                                       payload=json.dumps({"effect": "request_review", "head": head, "round": 1,
                                                           "nudge": nudge, "reviews_known_at": decided.isoformat()})))
            assert triggers() == 1, key


async def test_a_nudge_looks_at_who_is_requested_and_asks_nobody_still_pending(tmp_path, db_url):
    """A nudge comes while the round's request may be pending: it reads who is requested, however
    fresh, and a reviewer still requested is not asked again (a write, and for a person a
    request made anew)."""
    alice = {"login": "alice", "kind": "request"}
    copilot = {"login": COPILOT, "kind": "copilot"}
    async with bot_on_simulator(tmp_path, db_url, poller={"interval_seconds": 3600}, collaborators={"alice": "write"},
                                convergence={"reviewer": [copilot, alice]}) as h:
        pr = await h.sim.open_pr(REPO, title="Change", head="feat", author="dev",
                                 files={"app/core.py": "def f():\n    return 2\n"})
        repo, sim_pr = h.sim.pr(REPO, pr.number)
        head = await h.sim.head_sha(repo, sim_pr)
        decided = utcnow()
        await run_effect(h.rt, Job(kind="effect", pr_key=f"{REPO}#{pr.number}", key="start", status="running",
                                   run_at=decided, created_at=decided, attempts=1, process_key="p1",
                                   payload=json.dumps({"effect": "request_review", "head": head, "round": 1,
                                                       "reviews_known_at": decided.isoformat()})))
        h.sim.counters.reset()
        decided = utcnow()
        await run_effect(h.rt, Job(kind="effect", pr_key=f"{REPO}#{pr.number}", key="nudge", status="running",
                                   run_at=decided, created_at=decided, attempts=1, process_key="p1",
                                   payload=json.dumps({"effect": "request_review", "head": head, "round": 1,
                                                       "nudge": True, "reviews_known_at": decided.isoformat()})))
        writes = [(m, path) for m, path, _ in h.sim.counters.recent if m == "POST"]
        assert writes == [], writes


# -- the check run: a write only when there is something new to say ---------------------------


async def _quiet_pr(h) -> str:
    """An enrolled PR waiting for a review, its run made and every job of its own put off."""
    key, _ = await open_and_enroll(h)  # no reviewer: the PR waits for a review
    await h.wait_status(key, "waiting_review")
    await quiesce(h)
    await h.wait_for("the PR's own work put off or ended", lambda: _none_of_its_own_in_hand(h, key))
    return key


def _run_writes(h) -> tuple[int, int]:
    return len(_ours(h.sim, "check_run_created")), len(_ours(h.sim, "check_run_updated"))


async def test_a_check_run_update_writes_only_what_is_new_and_updates_the_run_it_knows(tmp_path, db_url):
    """An update that would say what this process last said writes nothing; one with something
    new updates the head's run the row knows, never creating a second one."""
    async with bot_on_simulator(tmp_path, db_url, poller={"interval_seconds": 3600}) as h:
        key = await _quiet_pr(h)
        created, updated = _run_writes(h)
        assert created == 1
        h.rt.check_runs.clear()  # as after a restart: the first update says it again
        h.sim.counters.reset()
        await check_run.write_run(h.rt, key)
        assert _run_writes(h) == (created, updated + 1)
        await check_run.write_run(h.rt, key)  # nothing changed: no write
        assert _run_writes(h) == (created, updated + 1)
        async with h.rt.db.session() as s:
            await s.exec(update(PullRequest).where(PullRequest.pr_key == key).values(status="waiting_merge"))
        await check_run.write_run(h.rt, key)
        assert _run_writes(h) == (created, updated + 2)
        assert _ours(h.sim, "check_run_updated")[-1]["output"]["title"].startswith("waiting merge")
        # The run the row knows on the head is updated without looking for it on GitHub.
        looks = [path for m, path, _ in h.sim.counters.recent if m == "GET" and path.endswith("/check-runs")]
        assert looks == []


async def test_on_a_restored_backup_the_update_of_a_pr_merged_since_finds_the_run_the_killed_bot_made(
        tmp_path, db_url, monkeypatch):
    """The killed bot made the head's run after the backup; restored, the PR went on to merged
    with its check run update held. The restore does not settle while that update is queued, and
    the update, looking (restored), finds the run: no second one on the head."""
    async with bot_on_simulator(tmp_path, db_url, poller={"interval_seconds": 3600}) as h:
        key = await _quiet_pr(h)
        created, _ = _run_writes(h)
        async with h.rt.db.session() as s:  # the backup knew no run on the head
            await s.exec(update(PullRequest).where(PullRequest.pr_key == key)
                         .values(check_run_head=None, check_run_id=None))
        _as_restored(monkeypatch)
        monkeypatch.setattr(h.rt, "scan_started_at", time.monotonic())
        h.rt.check_runs.clear()
        await finish(h.rt.db, key, "merged")
        async with h.rt.db.session() as s:  # held: nobody runs it before the tick
            await outbox.check_run(s, parse_pr_key(key), 3600.0)
        await Poller(h.rt).tick()
        assert outbox.MEMORY.restored, "settled with the merged PR's update still queued"
        await check_run.write_run(h.rt, parse_pr_key(key))
        assert _run_writes(h)[0] == created, "a second run on the head"


async def test_a_check_run_update_of_a_pr_with_no_head_or_no_row_writes_nothing(tmp_path, db_url):
    """A PR whose row has no head yet, or no row at all (pruned, or never enrolled), has no run
    to say anything on: the update ends, writing nothing and failing nothing."""
    async with bot_on_simulator(tmp_path, db_url, poller={"interval_seconds": 3600}) as h:
        key = await _quiet_pr(h)
        before = _run_writes(h)
        h.rt.check_runs.clear()
        async with h.rt.db.session() as s:
            await s.exec(update(PullRequest).where(PullRequest.pr_key == key).values(
                head_sha=None, check_run_id=None, check_run_head=None))
        await check_run.write_run(h.rt, key)
        await check_run.write_run(h.rt, PrKey(*REPO.split("/"), 999))
        assert _run_writes(h) == before


async def test_a_held_check_run_update_writes_once_its_hold_is_over(tmp_path, db_url):
    """An update held while the PR's other work is in hand is held at most
    `check_run_hold_seconds` after it was queued: a PR whose work never stops still shows where
    it is."""
    async with bot_on_simulator(tmp_path, db_url, poller={"interval_seconds": 3600},
                                github={"check_run_hold_seconds": 30}) as h:
        key = await _quiet_pr(h)
        async with h.rt.db.session() as s:
            await s.exec(update(PullRequest).where(PullRequest.pr_key == key).values(status="waiting_merge"))
            await outbox.add(s, "check_run", f"{key}:late", pr_key=key, delay_seconds=3600)
        sync_id, _ = await jobs.enqueue(h.rt.db, "sync", f"sync:{key}:test", pr_key=key, delay_seconds=3600)
        [mine] = [j for j in await jobs.list_jobs(h.rt.db, key) if j.key == f"fx:check_run:{key}:late"]
        await _running_elsewhere(h, sync_id, mine.id)
        # Queued a minute ago, the hold is spent: the sync under way no longer holds it.
        mine.created_at = utcnow() - timedelta(minutes=1)
        h.rt.check_runs.clear()
        await check_run.write_run(h.rt, key, mine)
        assert _ours(h.sim, "check_run_updated")[-1]["output"]["title"].startswith("waiting merge")
        # Queued just now, it is held.
        mine.created_at = utcnow()
        with pytest.raises(Reschedule):
            await check_run.write_run(h.rt, key, mine)


# -- replies: only ours of this round make the next one read first ----------------------------


async def test_a_reply_of_an_earlier_round_does_not_make_this_round_s_first_reply_read(tmp_path, db_url):
    """The round's read came after the replies queued before the round began: they are in it.
    Only one queued since makes the round's reply read the threads again."""
    async with bot_on_simulator(tmp_path, db_url, fixer=ASKS, poller={"interval_seconds": 3600}) as h:
        key, number, pk, threads = await _round_with_threads(h, 1)
        async with h.rt.db.session() as s:
            started = (await s.exec(select(Round.started_at).where(Round.pr_key == key, Round.round_no == 1))).one()
            await outbox.add(s, "reply", f"{pk}:0:earlier", pr_key=key, process_key=pk, replies=[], round=0)
            await s.exec(update(Job).where(Job.key == f"fx:reply:{pk}:0:earlier").values(
                status="done", created_at=started - timedelta(minutes=1), finished_at=started))
        h.sim.counters.reset()
        await _reply_effect(h, key, pk, threads, "a")
        assert _graphql(h) == 1  # the write alone
        assert _ours_on(h, threads[0].id) == 1
