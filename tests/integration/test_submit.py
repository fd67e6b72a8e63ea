"""submit_pr guards, on SQLite and PostgreSQL."""

import asyncio
import contextlib
import time

import pytest
from sqlmodel import select

import storage.prs
from bot.engine.submit import PR_LOCKS, SubmitOptions, abandon_pr, submit_pr
from storage import prs, runs
from storage.keys import parse_pr_key
from storage.locks import KeyedLocks
from storage.models import Adjudication, Escalation, PullRequest, utcnow
from storage.statuses import ACTIVE, TERMINAL

from ..helpers import enroll, finish, install_history, lock_waiter, read_history, until
from .resubmits import (
    RESUBMIT_WRITES,
    InjectedFault,
    Writes,
    finished_with_questions,
    ghost_runs,
    resubmit_state,
)

KEY = "acme/widgets#1"


def slow_read(monkeypatch, log: list | None = None, delay: float = 0.1):
    """Widen the window between submit_pr's ownership read and its write, and note who was inside."""
    original = storage.prs.get

    async def get(db, pr_key):
        start = time.monotonic()
        view = await original(db, pr_key)
        await asyncio.sleep(delay)
        if log is not None:
            log.append((pr_key, start, time.monotonic()))
        return view

    monkeypatch.setattr(storage.prs, "get", get)


async def test_enroll_then_submit_again_is_idempotent(db):
    pk = await enroll(db, KEY)
    again = await submit_pr(db, parse_pr_key(KEY))
    assert again.outcome == "already_running"
    assert again.process_key == pk
    assert len(await runs.runs_for(db, KEY)) == 1


async def test_two_concurrent_submits_for_a_terminal_pr_create_exactly_one_run(db, monkeypatch):
    await enroll(db, KEY)
    old = await finish(db, KEY)
    slow_read(monkeypatch)
    results = await asyncio.gather(*(submit_pr(db, parse_pr_key(KEY)) for _ in range(2)))
    assert sorted(r.outcome for r in results) == ["already_running", "started"]
    all_runs = await runs.runs_for(db, KEY)
    # The original run plus exactly one new one: the loser never created a run.
    assert len(all_runs) == 2
    new = [r for r in all_runs if r.process_key != old]
    assert new[0].state == "active"
    assert {r.process_key for r in results} == {new[0].process_key}
    assert len(PR_LOCKS) == 0


async def test_concurrent_submits_for_a_new_pr_create_exactly_one_run(db):
    results = await asyncio.gather(*(submit_pr(db, parse_pr_key(KEY)) for _ in range(5)))
    assert sorted(r.outcome for r in results) == ["already_running"] * 4 + ["started"]
    all_runs = await runs.runs_for(db, KEY)
    assert len(all_runs) == 1
    assert (await prs.get(db, KEY)).pr.process_key == all_runs[0].process_key


async def test_different_prs_submitted_concurrently_overlap_in_time(db, monkeypatch):
    for key in ("acme/widgets#1", "acme/widgets#2"):
        await enroll(db, key)
        await finish(db, key)
    inside: list = []
    slow_read(monkeypatch, inside, delay=0.3)
    results = await asyncio.gather(
        submit_pr(db, parse_pr_key("acme/widgets#1")), submit_pr(db, parse_pr_key("acme/widgets#2"))
    )
    assert [r.outcome for r in results] == ["started", "started"]
    (_, a_start, a_end), (_, b_start, b_end) = sorted(inside)
    assert a_start < b_end and b_start < a_end, "one PR's submit waited for the other's"


async def test_reopen_never_shows_the_new_run_with_the_old_key(db, monkeypatch):
    """Every write to the row, as recorded by a trigger, changes status and key together."""
    await install_history(db)
    slow_read(monkeypatch, delay=0.02)
    await enroll(db, KEY)
    for cycle in range(3):
        await finish(db, KEY, "converged" if cycle % 2 else "merged")
        results = await asyncio.gather(*(submit_pr(db, parse_pr_key(KEY)) for _ in range(3)))
        assert sorted(r.outcome for r in results) == ["already_running"] * 2 + ["started"]
    pk = (await prs.get(db, KEY)).pr.process_key
    await abandon_pr(db, KEY, "test")
    await enroll(db, KEY)

    history = await read_history(db, KEY)
    assert len(history) >= 9
    seen_terminal: set[str] = set()
    first_seen: set[str] = set()
    for status, key, round_no in history:
        if key not in first_seen:
            first_seen.add(key)
            assert (status, round_no) == ("converging", 1), (status, key, round_no)
        if status in TERMINAL:
            seen_terminal.add(key)
        elif key in seen_terminal:
            pytest.fail(f"row went back to {status} while still carrying the ended run {key}")
        assert status in ACTIVE | TERMINAL
    assert pk in seen_terminal
    assert len(first_seen) == 5


@pytest.mark.parametrize("position", range(1, RESUBMIT_WRITES + 1))
async def test_a_resubmit_failing_after_any_of_its_writes_leaves_the_pr_as_it_was_and_no_ghost_run(db, position):
    """The resubmit's writes are one transaction: a failure after any one of them (the statement
    ran, the commit had not) leaves the finished PR as it was, not a new run no row points at."""
    old = await finished_with_questions(db, KEY)
    fault = Writes(db, fail_after=position)
    try:
        with pytest.raises(InjectedFault):
            await submit_pr(db, parse_pr_key(KEY))
    finally:
        fault.remove()
    assert len(fault.seen) == position
    assert await resubmit_state(db, KEY, old) == "old"

    counted = Writes(db)
    try:
        again = await submit_pr(db, parse_pr_key(KEY))
    finally:
        counted.remove()
    assert again.outcome == "started"
    assert await resubmit_state(db, KEY, old) == "reopened"
    assert len(counted.seen) == RESUBMIT_WRITES, "a write of the resubmit no position tries"


async def test_keyless_active_row_is_resubmittable(db):
    now = utcnow()
    async with db.session() as s:
        s.add(PullRequest(
            pr_key=KEY, repo="acme/widgets", number=1, url="u", title="t", status="converging",
            current_round=3, process_key=None, created_at=now, updated_at=now,
        ))
    view = await prs.get(db, KEY)
    assert view.resubmittable
    result = await submit_pr(db, parse_pr_key(KEY))
    assert result.outcome == "started"
    view = await prs.get(db, KEY)
    assert (view.pr.process_key, view.pr.current_round, view.run_state) == (result.process_key, 1, "active")


async def test_run_terminated_out_of_band_reads_abandoned_and_is_resubmittable(db):
    pk = await enroll(db, KEY)
    assert await runs.terminate_run(db, pk, "operator")
    view = await prs.get(db, KEY)
    assert view.pr.status == "converging"
    assert view.derived_status == "abandoned"
    result = await submit_pr(db, parse_pr_key(KEY))
    assert result.outcome == "started" and result.process_key != pk


async def test_a_run_terminated_out_of_band_writes_its_row_no_more(db):
    """Its key is still on the row and the row still reads converging: only the run's own end
    tells a job of it, still queued, that nobody drives this PR any more."""
    pk = await enroll(db, KEY)
    assert await runs.terminate_run(db, pk, "operator")
    assert not await prs.fenced_update(db, KEY, pk, {"last_action": "a job of the ended run"})
    view = await prs.get(db, KEY)
    assert (view.pr.process_key, view.pr.last_action) == (pk, None) and view.derived_status == "abandoned"


async def test_resubmit_resets_per_run_state_and_marks_escalations_stale(db):
    pk = await enroll(db, KEY, max_rounds=3)
    now = utcnow()
    assert await prs.fenced_update(db, KEY, pk, {
        "current_round": 3, "last_review_id": 99, "husk_retries": 2, "waiting_since": now,
        "last_progress_job_key": "pc:1", "last_progress_result": "{}", "outcome": "x",
    })
    async with db.session() as s:
        s.add(Escalation(pr_key=KEY, process_key=pk, round_no=3, kind="stalled", question="q?",
                         fingerprint="f1", status="open", asked_at=now))
        s.add(Adjudication(pr_key=KEY, fingerprint="f0", answer="decline", adjudicated_by="m",
                           adjudicated_at=now))
    await abandon_pr(db, KEY, "stop")
    result = await submit_pr(db, parse_pr_key(KEY), SubmitOptions(max_rounds=5, converge_only=True))
    pr = (await prs.get(db, KEY)).pr
    assert (pr.status, pr.current_round, pr.max_rounds, pr.converge_only) == ("converging", 1, 5, True)
    assert (pr.last_review_id, pr.husk_retries, pr.waiting_since) == (None, 0, None)
    assert (pr.last_progress_job_key, pr.last_progress_result, pr.outcome) == (None, None, None)
    assert pr.process_key == result.process_key
    async with db.session() as s:
        assert (await s.exec(select(Escalation.status))).all() == ["stale"]
        assert (await s.exec(select(Adjudication.invalidated_at))).one() is not None


async def test_abandon_fences_the_old_run(db):
    pk = await enroll(db, KEY)
    assert await abandon_pr(db, KEY, "stop")
    assert not await abandon_pr(db, KEY, "again")
    view = await prs.get(db, KEY)
    assert (view.derived_status, view.run_state) == ("abandoned", "terminated")
    assert not await prs.fenced_update(db, KEY, pk, {"status": "converging"})


async def test_an_enrollment_for_new_prs_only_starts_a_new_pr_and_leaves_a_stopped_one_stopped(db):
    # The repository scan's enrollment: it read "no row", then the PR was enrolled and stopped.
    await enroll(db, KEY)
    assert await abandon_pr(db, KEY, "stopped by @maint")
    late = await submit_pr(db, parse_pr_key(KEY), SubmitOptions(only_if_new=True))
    assert late.outcome == "already_running"
    assert (await prs.get(db, KEY)).derived_status == "abandoned"
    assert len(await runs.runs_for(db, KEY)) == 1
    fresh = await submit_pr(db, parse_pr_key("acme/widgets#2"), SubmitOptions(only_if_new=True))
    assert fresh.outcome == "started"


@pytest.mark.parametrize("terminal", [False, True], ids=["new", "terminal"])
async def test_two_processes_racing_one_pr_leave_one_active_run(db, monkeypatch, terminal):
    """Separate lock registries stand for separate processes: only the CAS writes decide."""
    if terminal:
        await enroll(db, KEY)
        await finish(db, KEY)
    slow_read(monkeypatch)
    results = await asyncio.gather(
        *(submit_pr(db, parse_pr_key(KEY), locks=KeyedLocks()) for _ in range(4))
    )
    assert sorted(r.outcome for r in results) == ["already_running"] * 3 + ["started"]
    active = [r for r in await runs.runs_for(db, KEY) if r.state == "active"]
    assert len(active) == 1
    assert (await prs.get(db, KEY)).pr.process_key == active[0].process_key


class ReadGate:
    """Hold the first `n` reads of the PR row (submit_pr's ownership read) until released.

    Each held reader has finished its read, so every one of them decides from the same row, as
    submitters in separate processes would; `release()` lets them all write. Reads after the
    first `n` (the loser's read-back, the test's own) pass straight through.
    """

    def __init__(self, monkeypatch, n: int) -> None:
        self.n = n
        self.views: list = []
        self.all_read = asyncio.Event()
        self._released = asyncio.Event()
        original = storage.prs.get

        async def get(db, pr_key):
            view = await original(db, pr_key)
            if len(self.views) < self.n:
                self.views.append(view)
                if len(self.views) == self.n:
                    self.all_read.set()
                await asyncio.wait_for(self._released.wait(), timeout=30)
            return view

        monkeypatch.setattr(storage.prs, "get", get)

    async def wait_all_read(self) -> None:
        await asyncio.wait_for(self.all_read.wait(), timeout=30)

    def release(self) -> None:
        self._released.set()


async def _submit_in_two_processes(db, gate: ReadGate):
    """Two submit_pr calls with separate lock registries (two processes), both past their read."""
    tasks = [asyncio.create_task(submit_pr(db, parse_pr_key(KEY), locks=KeyedLocks())) for _ in range(2)]
    await gate.wait_all_read()
    gate.release()
    return await asyncio.wait_for(asyncio.gather(*tasks), timeout=60)


class ArrivingLocks(KeyedLocks):
    """A lock registry that counts the submits that came to it, held or waiting."""

    def __init__(self) -> None:
        super().__init__()
        self.arrived = 0

    @contextlib.asynccontextmanager
    async def hold(self, key: str):
        self.arrived += 1
        async with super().hold(key):
            yield


async def test_a_second_submit_in_one_process_waits_for_the_first_and_sends_no_reopen(db, monkeypatch):
    """The reopen's compare-and-set alone lets one of two submits win; the per-PR lock is what
    keeps the second, in the same process, from sending a reopen that must lose: it waits, then
    reads the first one's run and answers already running without a write."""
    await enroll(db, KEY)
    old = await finish(db, KEY)
    gate = ReadGate(monkeypatch, 2)
    locks = ArrivingLocks()
    writes = Writes(db)
    try:
        first = asyncio.create_task(submit_pr(db, parse_pr_key(KEY), locks=locks))

        async def first_read() -> bool:
            return len(gate.views) == 1

        async def second_waits_or_read() -> bool:
            return locks.arrived == 2 or len(gate.views) == 2

        await until("the first submit's read", first_read)
        second = asyncio.create_task(submit_pr(db, parse_pr_key(KEY), locks=locks))
        await until("the second submit waiting for the PR, or past its read", second_waits_or_read)
        gate.release()
        results = await asyncio.wait_for(asyncio.gather(first, second), timeout=60)
    finally:
        writes.remove()

    assert [r.outcome for r in results] == ["started", "already_running"]
    assert results[1].process_key == results[0].process_key
    assert [(r.process_key, r.state) for r in await runs.runs_for(db, KEY)] == [
        (old, "completed"), (results[0].process_key, "active")]
    assert await ghost_runs(db) == []
    sent = [w for w in writes.seen if w.lstrip().upper().startswith("UPDATE PULL_REQUESTS")]
    assert len(sent) == 1, "the second submit sent a reopen"


async def test_two_processes_submitting_a_new_pr_both_read_no_row_and_one_run_starts(db, monkeypatch):
    """The insert's compare-and-set decides: both submitters read "no row" and both insert."""
    gate = ReadGate(monkeypatch, 2)
    results = await _submit_in_two_processes(db, gate)
    assert gate.views == [None, None], "the submitters did not both read before writing"

    assert sorted(r.outcome for r in results) == ["already_running", "started"]
    winner = next(r for r in results if r.outcome == "started")
    loser = next(r for r in results if r.outcome == "already_running")
    assert loser.process_key == winner.process_key
    all_runs = await runs.runs_for(db, KEY)
    # The loser's run was never recorded, so nothing active is left without the row.
    assert [(r.process_key, r.state) for r in all_runs] == [(winner.process_key, "active")]
    view = await prs.get(db, KEY)
    assert (view.pr.process_key, view.derived_status) == (winner.process_key, "converging")


@pytest.mark.parametrize("shape", ["run-ended-out-of-band", "keyless"])
async def test_two_processes_reopening_a_converging_row_with_no_live_run_start_one_run(db, monkeypatch, shape):
    """Both submitters read `converging` with no live run; after one reopens, the row is
    `converging` again, so only the key on the row tells the other its read is stale."""
    if shape == "keyless":
        now = utcnow()
        async with db.session() as s:
            s.add(PullRequest(pr_key=KEY, repo="acme/widgets", number=1, url="u", title="t",
                              status="converging", current_round=2, process_key=None,
                              created_at=now, updated_at=now))
        old = None
    else:
        old = await enroll(db, KEY)
        assert await runs.terminate_run(db, old, "operator")
    gate = ReadGate(monkeypatch, 2)
    results = await _submit_in_two_processes(db, gate)
    assert all(v.resubmittable and v.pr.status == "converging" for v in gate.views)

    assert sorted(r.outcome for r in results) == ["already_running", "started"]
    winner = next(r for r in results if r.outcome == "started")
    view = await prs.get(db, KEY)
    assert (view.pr.process_key, view.pr.status, view.run_state) == (winner.process_key, "converging", "active")
    # The loser's reopen matched nothing, and its transaction wrote nothing: no run of its own.
    new = [r.process_key for r in await runs.runs_for(db, KEY) if r.process_key != old]
    assert new == [winner.process_key]


async def test_a_run_cannot_move_its_row_on_once_its_terminal_status_is_written(db):
    """A row whose terminal status is written under a run still active (an older version wrote
    the two apart; PostgreSQL lets a write held behind the end read the run as it was): the
    run's next write is refused, and a submit reopens the row under a new run."""
    pk = await enroll(db, KEY)
    assert await prs.fenced_update(db, KEY, pk, {"status": "converged"})
    assert (await runs.get_run(db, pk)).state == "active"

    assert not await prs.fenced_update(db, KEY, pk, {"status": "converging", "current_round": 2})
    view = await prs.get(db, KEY)
    assert (view.pr.status, view.pr.current_round, view.resubmittable) == ("converged", 1, True)
    result = await submit_pr(db, parse_pr_key(KEY))
    assert result.outcome == "started" and result.process_key != pk


async def test_a_run_still_active_whose_key_left_the_row_cannot_write_it(db):
    """A superseded run whose end is not written yet still reads `active`: the key on the row,
    not the run's state alone, decides who may write."""
    old = await enroll(db, KEY)
    new = runs.new_run(parse_pr_key(KEY))
    async with db.session() as s:
        assert await prs.reopen(s, KEY, old_process_key=old,
                                new_process_key=new.process_key, options={})
        await runs.record(s, new)
    assert (await runs.get_run(db, old)).state == "active"

    assert not await prs.fenced_update(db, KEY, old, {"status": "abandoned", "outcome": "straggler"})
    assert not await prs.fenced_update(db, KEY, old, {"current_round": 7}, expect_status="converging")
    view = await prs.get(db, KEY)
    assert (view.pr.process_key, view.pr.status, view.pr.current_round, view.pr.outcome) == (
        new.process_key, "converging", 1, None)
    # The owner still writes.
    assert await prs.fenced_update(db, KEY, new.process_key, {"current_round": 2})
    assert (await prs.get(db, KEY)).pr.current_round == 2


async def test_a_write_held_behind_the_runs_end_does_not_land_after_it(db):
    """The merge records `merged` and ends the run in one transaction while a step, which read
    the row `merging` and GitHub's PR merged, writes the same end behind it. Held on the row's
    lock, it must lose once the end commits: on PostgreSQL the row is checked again after the
    wait but the run is read as it was (active), so the row's own status has to fence it."""
    pk = await enroll(db, KEY)
    assert await prs.fenced_update(db, KEY, pk, {"status": "merging"})

    ending = db.session()
    s = await ending.__aenter__()
    try:
        assert await prs.fenced_update(None, KEY, pk, {"status": "merged", "outcome": "merged"}, session=s)
        assert await runs.end_run(None, pk, "completed", "merged", session=s)
        late = asyncio.create_task(prs.fenced_update(
            db, KEY, pk, {"status": "merged", "outcome": "merged outside convergebot"}))
        # On SQLite this process's writers take turns: the step's waits for the end's session,
        # and reads the row afresh once it has its turn, whenever that is.
        await asyncio.sleep(0)
        if db.backend == "postgresql":
            await until("the step's write held behind the end", lambda: lock_waiter(db))
        assert not late.done()
    finally:
        await ending.__aexit__(None, None, None)

    assert not await late
    view = await prs.get(db, KEY)
    assert (view.pr.status, view.pr.outcome) == ("merged", "merged")


async def test_a_title_of_only_whitespace_is_no_title(db):
    key = parse_pr_key(KEY)
    await submit_pr(db, key, SubmitOptions(title="   "))
    assert (await prs.get(db, key)).pr.title == KEY  # the key stands in until GitHub is read
    await finish(db, KEY)
    await submit_pr(db, key, SubmitOptions(title="Fix the parser"))
    await finish(db, KEY)
    await submit_pr(db, key, SubmitOptions(title="\t "))  # a reopen keeps the title it has
    assert (await prs.get(db, key)).pr.title == "Fix the parser"


async def test_the_working_lists_read_no_finished_pr(db):
    """The poller's list (`list_unfinished`) and the watchdog's (`list_all(active_only=True)`)
    leave the finished history out; the poller's keeps a row a crash left without its key."""
    from ..helpers import enroll, finish

    for n in (1, 2, 3):
        await enroll(db, f"acme/widgets#{n}")
    await finish(db, "acme/widgets#1", "merged")
    await finish(db, "acme/widgets#2", "abandoned")
    now = utcnow()
    async with db.session() as s:
        s.add(PullRequest(pr_key="acme/widgets#4", repo="acme/widgets", number=4, url="u", title="t",
                          status="converging", current_round=0, process_key=None, created_at=now, updated_at=now))
    assert [v.pr.pr_key for v in await prs.list_unfinished(db)] == ["acme/widgets#3", "acme/widgets#4"]
    assert [v.pr.pr_key for v in await prs.list_all(db, active_only=True)] == ["acme/widgets#3"]
    assert len(await prs.list_all(db)) == 4
