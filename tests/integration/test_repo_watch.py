"""PRs that only wait for a review are watched per repository: one conditional read of the
repository's PR list, most recently updated first, says which of them changed; only those are
re-read. Against the simulator; on both backends where the marks are stored."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import update

from bot.fixers import ScriptedFixer
from bot.intake.poller import Poller
from storage import marks
from storage.models import PullRequest, utcnow

from ..e2e.harness import COPILOT, REPO, bot_on_simulator, quiesce

AUTH = {"Authorization": "Bearer api-token"}
# Long enough that no review timeout or nudge comes due within a tick of an hour.
PATIENT = {"review_wait_timeout_seconds": 7 * 3600, "nudge_window_seconds": 3 * 3600}


async def _enroll_waiting(h, n: int) -> list[str]:
    keys = []
    for i in range(n):
        pr = await h.sim.open_pr(REPO, title=f"t{i}", head=f"side-{i}", author="dev",
                                 files={f"app/x{i}.py": "x = 1\n"})
        r = await h.http.post("/api/prs", json={"pr": f"{REPO}#{pr.number}"}, headers=AUTH)
        assert r.status_code == 201, r.text
        keys.append(f"{REPO}#{pr.number}")
    for key in keys:
        await h.wait_status(key, "waiting_review")
    await quiesce(h)
    return keys


async def _tick(h, poller: Poller) -> dict:
    h.sim.counters.reset()
    await poller.tick()
    await quiesce(h)
    return h.sim.counters.snapshot()


def _list_reads(h) -> list[int]:
    return [status for method, path, status in h.sim.counters.recent
            if method == "GET" and path.rstrip("/").endswith("/pulls")]


async def _settled(h, poller: Poller) -> None:
    """Ticks until a tick changes nothing (re-reads nothing, or only 304s): the first ticks see
    our own first writes."""
    for _ in range(6):
        await _tick(h, poller)
        # Calm: every request of the tick answered 304 (a write made during it, such as the
        # review request still on its way when the tick read, changes what the next one reads).
        if h.sim.counters.get(status=304) == h.sim.counters.total():
            return
    raise AssertionError(f"never settled: queued {poller.queued}, resting {poller.skipped}")


async def test_resting_prs_cost_one_list_read_and_a_changed_one_is_re_read(tmp_path, sqlite_db_url):
    async with bot_on_simulator(tmp_path, sqlite_db_url, fixer=ScriptedFixer(["noop"]),
                                poller={"interval_seconds": 3600, "repo_watch_min_prs": 2},
                                convergence=PATIENT) as h:
        h.sim.webhook_faults(drop_all=True)  # only the poll can see what happens next
        keys = await _enroll_waiting(h, 3)
        poller = Poller(h.rt)
        first = await _tick(h, poller)
        # The first look since the start cannot tell what changed: every PR is re-read.
        assert poller.queued == 3 and poller.skipped == 0, first
        await _settled(h, poller)
        counts = await _tick(h, poller)
        assert (poller.queued, poller.skipped) == (0, 3)
        assert counts["total"] == 1 and _list_reads(h) == [304], h.sim.counters.recent

        number = int(keys[2].split("#")[1])
        mark = poller.watch.mark(REPO)
        review = await h.sim.submit_review(REPO, number, user=COPILOT, body="LGTM", state="COMMENTED")
        # Besides the reviewed PR, those stamped in the very second of the last look are read
        # again: GitHub stamps to the second, so one of them may have changed after that look.
        same_second = {p.number for p in h.sim.state.prs_of(h.sim.repo(REPO))
                       if p.updated_at.replace(microsecond=0) == mark and p.number != number}
        await _tick(h, poller)
        assert (poller.queued, poller.skipped) == (1 + len(same_second), 2 - len(same_second))
        assert _list_reads(h)[0] == 200
        assert (await h.view(keys[2])).pr.latest_review_id == review.id


async def test_a_pr_with_a_nudge_due_is_re_read_and_few_prs_are_not_watched(tmp_path, sqlite_db_url):
    async with bot_on_simulator(tmp_path, sqlite_db_url, fixer=ScriptedFixer(["noop"]),
                                poller={"interval_seconds": 3600, "repo_watch_min_prs": 2},
                                convergence={"review_wait_timeout_seconds": 7 * 3600,
                                             "nudge_window_seconds": 2 * 3600}) as h:
        keys = await _enroll_waiting(h, 3)
        poller = Poller(h.rt)
        await _settled(h, poller)
        # One PR's next nudge has come due: that PR is re-read (and nudged), unchanged or not.
        async with h.rt.db.session() as s:
            await s.exec(update(PullRequest).where(PullRequest.pr_key == keys[0]).values(
                last_nudge_at=utcnow() - timedelta(hours=2, minutes=1)))
        await _tick(h, poller)
        assert (poller.queued, poller.skipped) == (1, 2)
        assert (await h.view(keys[0])).pr.last_action == "nudged reviewers"


async def test_a_repository_with_fewer_waiting_prs_than_the_minimum_is_not_watched(tmp_path, sqlite_db_url):
    async with bot_on_simulator(tmp_path, sqlite_db_url, fixer=ScriptedFixer(["noop"]),
                                poller={"interval_seconds": 3600, "repo_watch_min_prs": 3},
                                convergence=PATIENT) as h:
        await _enroll_waiting(h, 2)
        poller = Poller(h.rt)
        await _settled(h, poller)  # settles on 304s, each PR re-read
        counts = await _tick(h, poller)
        assert (poller.queued, poller.skipped) == (2, 0)
        assert _list_reads(h) == [] and h.sim.counters.get(status=304) == counts["total"]


async def test_each_resting_pr_is_still_re_read_once_per_full_sync_a_share_per_tick(tmp_path, sqlite_db_url):
    async with bot_on_simulator(tmp_path, sqlite_db_url, fixer=ScriptedFixer(["noop"]),
                                poller={"interval_seconds": 3600, "full_sync_seconds": 7200,
                                        "repo_watch_min_prs": 2},
                                convergence=PATIENT) as h:
        keys = await _enroll_waiting(h, 3)
        poller = Poller(h.rt)
        await _settled(h, poller)
        # Three hours pass without a change on GitHub: every PR is due its full re-read, and
        # each tick takes the share that spreads them over full_sync_seconds (3 × 3600/7200).
        poller.polled_at = {k: t - timedelta(hours=3) for k, t in poller.polled_at.items()}
        queued = []
        for _ in range(3):
            await _tick(h, poller)
            queued.append(poller.queued)
        assert queued == [2, 1, 0]
        assert set(poller.polled_at) == set(keys)


async def test_after_a_restart_only_what_changed_is_re_read(tmp_path, db_url):
    """The marks are kept in the database: the first tick of a new process needs no full re-read,
    only what changed and its share of the spread full re-reads (one PR here)."""
    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["noop"]),
                                poller={"interval_seconds": 3600, "full_sync_seconds": 36000,
                                        "repo_watch_min_prs": 2},
                                convergence=PATIENT) as h:
        h.sim.webhook_faults(drop_all=True)
        keys = await _enroll_waiting(h, 4)
        await _settled(h, Poller(h.rt))
        saved = (await marks.load(h.rt.db))[REPO]
        number = int(keys[3].split("#")[1])
        review = await h.sim.submit_review(REPO, number, user=COPILOT, body="LGTM", state="COMMENTED")
        changed = {p.number for p in h.sim.state.prs_of(h.sim.repo(REPO))
                   if p.updated_at.replace(microsecond=0) >= saved}
        assert number in changed
        restarted = Poller(h.rt)  # a new process: no marks in memory, no PR re-read yet
        await _tick(h, restarted)
        resting = max(0, 4 - len(changed) - 1)  # the unchanged but one, re-read as the share
        assert (restarted.queued, restarted.skipped) == (4 - resting, resting)
        assert (await h.view(keys[3])).pr.latest_review_id == review.id
        assert (await marks.load(h.rt.db))[REPO] > saved


async def test_a_changed_pr_the_list_names_is_re_read_though_its_own_work_is_queued(tmp_path, sqlite_db_url):
    """The list read moves the repository's mark past a changed PR: that tick must re-read it,
    even when it would leave it out for a job of its own queued (a review request backing off),
    or the PR would rest with its review unread."""
    from storage import jobs

    async with bot_on_simulator(tmp_path, sqlite_db_url, fixer=ScriptedFixer(["noop"]),
                                poller={"interval_seconds": 3600, "repo_watch_min_prs": 2,
                                        "fresh_read_seconds": 30},
                                convergence=PATIENT) as h:
        h.sim.webhook_faults(drop_all=True)  # only the poll can see what happens next
        keys = await _enroll_waiting(h, 3)
        poller = Poller(h.rt)
        await _settled(h, poller)
        number = int(keys[2].split("#")[1])
        await jobs.enqueue(h.rt.db, "effect", "backing-off", pr_key=keys[2], delay_seconds=20)
        h.rt.read_at.clear()
        review = await h.sim.submit_review(REPO, number, user=COPILOT, body="LGTM", state="COMMENTED")
        await _tick(h, poller)
        assert keys[2] in poller.watch_changed and poller.fresh == 0
        assert (await h.view(keys[2])).pr.latest_review_id == review.id


async def test_a_pr_left_out_for_its_queued_work_is_re_read_the_tick_after(tmp_path, sqlite_db_url):
    """A job that stays queued (a backlog) leaves its PR out of one tick at most in a row."""
    from storage import jobs

    async with bot_on_simulator(tmp_path, sqlite_db_url, fixer=ScriptedFixer(["noop"]),
                                poller={"interval_seconds": 60, "fresh_read_seconds": 30},
                                convergence=PATIENT) as h:
        (key,) = await _enroll_waiting(h, 1)
        poller = Poller(h.rt)
        await jobs.enqueue(h.rt.db, "effect", "queued-long", pr_key=key, delay_seconds=20)
        left_out = []
        for _ in range(4):
            h.rt.read_at.clear()  # not read lately: only its queued work can leave it out
            await _tick(h, poller)
            left_out.append(poller.fresh)
        assert left_out == [1, 0, 1, 0]


async def test_a_waiting_pr_never_nudged_is_due_its_nudge_now_and_does_not_rest(tmp_path, sqlite_db_url):
    """A wait with no nudge yet has its first one due at once (as the round's rules read it):
    the tick re-reads it though its repository's list says it did not change."""
    async with bot_on_simulator(tmp_path, sqlite_db_url, fixer=ScriptedFixer(["noop"]),
                                poller={"interval_seconds": 3600, "repo_watch_min_prs": 2},
                                convergence=PATIENT) as h:
        keys = await _enroll_waiting(h, 3)
        poller = Poller(h.rt)
        await _settled(h, poller)
        async with h.rt.db.session() as s:
            await s.exec(update(PullRequest).where(PullRequest.pr_key == keys[0]).values(last_nudge_at=None))
        await _tick(h, poller)
        assert (poller.queued, poller.skipped) == (1, 2)
        assert (await h.view(keys[0])).pr.last_action == "nudged reviewers"
