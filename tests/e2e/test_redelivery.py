"""Lost webhooks come back: the bot, as a GitHub App, replays its delivery log.

The real bot (serve's stack, App auth) against the real simulator. Deliveries are lost the ways
they are lost in production: dropped on the way, answered 503 by what stands in front of a
restarting bot, sent while nothing listens, or taken by the bot with the answer lost.
"""

from __future__ import annotations

import socket
import uuid
from contextlib import asynccontextmanager

import httpx
import pytest
import structlog.testing
from sqlalchemy import update
from sqlmodel import select
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from bot.engine import outbox
from bot.github.errors import GitHubError, NotFound
from bot.intake.poller import Poller
from bot.intake.redelivery import APP_LOG, CURSOR, Log, covers, redeliver_missed
from bot.intake.scan import scan
from bot.runtime.leadership import Leadership
from simulator import AsgiServer
from storage import commands, cursors, runs
from storage.models import Job

from ..helpers import app_private_key
from ..serving import WEBHOOK_SECRET
from .harness import (
    COPILOT,
    REPO,
    HeldFixer,
    bot_on_simulator,
    due_soon,
    open_and_enroll,
    quiesce,
    steps,
)

ACTIVE = ("converging", "waiting_review")
# Long enough that no review timeout or nudge comes due within the test.
PATIENT = {"review_wait_timeout_seconds": 7 * 3600, "nudge_window_seconds": 3 * 3600}
# The repository scan finds lost commands too; these tests are about the delivery log alone.
NO_SCAN = {"scan": {"enabled": False}}
ATTEMPTS = "/app/hook/deliveries/{delivery_id}/attempts"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@asynccontextmanager
async def app_bot(tmp_path, db_url, sections: dict | None = None, fixer=None, **webhooks):
    """The bot configured as a GitHub App (its key made here; the simulator does not check it);
    `sections`: more of its config, by section."""
    pem = app_private_key(tmp_path)
    # githubkit caches installation tokens process-wide by (app, installation): ids of our own.
    ids = uuid.uuid4().int % 10**8
    async with bot_on_simulator(
        tmp_path, db_url, fixer=fixer,
        github={"app_id": str(ids), "private_key_path": str(pem), "installation_id": ids + 1},
        webhooks={"redelivery_interval_seconds": 3600, **webhooks}, **NO_SCAN, **(sections or {}),
    ) as h:
        h.hook = f"{h.http.base_url}/webhook"
        # The pass at start-up has stored its cursor: the test's own passes never overlap it.
        await h.wait_for("the first pass", lambda: cursors.load(h.rt.db, CURSOR))
        yield h


async def _pr(h, head: str) -> tuple[str, int]:
    pr = await h.sim.open_pr(REPO, title=f"Change {head}", head=head, author="dev",
                             files={f"app/{head}.py": "X = 2\n"})
    await h.sim.settle()
    return f"{REPO}#{pr.number}", pr.number


async def _enrolled_and_waiting(h, keys: list[str]) -> None:
    """Each PR enrolled through the API and waiting for its review, the bot quiet."""
    for key in keys:
        r = await h.http.post("/api/prs", json={"pr": key}, headers={"Authorization": "Bearer api-token"})
        assert r.status_code == 201, r.text
    for key in keys:
        await h.wait_status(key, "waiting_review")
    await quiesce(h)


def _guid_of_comment(h, comment_id: int) -> str:
    [d] = [d for d in h.sim.webhooks.find("issue_comment", "created")
           if d.payload["comment"]["id"] == comment_id]
    return d.id


async def _settled(h, key: str) -> bool:
    """Its commands were handled (a row marked `received` is one under way)."""
    rows = await commands.for_pr(h.rt.db, key)
    return bool(rows) and all(c.why != "received" for c in rows)


async def _commands_of(h, key: str) -> list[tuple[int, str, bool | None]]:
    return [(c.comment_id, c.verb, c.accepted) for c in await commands.for_pr(h.rt.db, key)]


async def test_lost_commands_and_labels_take_effect_once_when_redelivered(tmp_path, db_url, webhook_receiver):
    async with app_bot(tmp_path, db_url) as h:
        dropped_key, dropped_n = await _pr(h, "dropped")
        label_key, label_n = await _pr(h, "label")
        refused_key, refused_n = await _pr(h, "refused")
        down_key, down_n = await _pr(h, "down")

        h.sim.webhook_faults(drop_next=1)  # lost on the way
        dropped = await h.sim.comment(REPO, dropped_n, "/converge", user="maint")
        h.sim.webhook_faults(drop_next=1)
        await h.sim.add_labels(REPO, label_n, ["converge"], actor="maint")
        webhook_receiver.status = 503  # a proxy in front of a bot that is restarting
        h.sim.configure_webhooks(webhook_receiver.url, WEBHOOK_SECRET)
        refused = await h.sim.comment(REPO, refused_n, "/converge", user="maint")
        await h.sim.settle()
        h.sim.configure_webhooks(f"http://127.0.0.1:{_closed_port()}/webhook", WEBHOOK_SECRET)
        down = await h.sim.comment(REPO, down_n, "/converge", user="maint")  # nothing listens
        await h.sim.settle()
        h.sim.configure_webhooks(h.hook, WEBHOOK_SECRET)
        keys = (dropped_key, label_key, refused_key, down_key)
        assert [await h.view(k) for k in keys] == [None] * 4

        report = await redeliver_missed(h.rt)
        assert covers(h.rt)  # everything missed was asked for

        [labeled] = h.sim.webhooks.find("pull_request", "labeled")
        lost = {_guid_of_comment(h, c.id) for c in (dropped, refused, down)} | {labeled.id}
        assert set(report.asked) == lost and report.recorded == 0
        for key in keys:
            await h.wait_status(key, *ACTIVE)
        for key, comment in ((dropped_key, dropped), (refused_key, refused), (down_key, down)):
            await h.wait_for(f"{key}'s command", lambda k=key: _settled(h, k))
            assert await _commands_of(h, key) == [(comment.id, "start", True)]
        await h.sim.settle()
        # Each redelivery reached the bot once, with the guid of the delivery that was lost.
        redelivered = [e for e in h.sim.webhooks.log.entries if e.redelivery]
        assert sorted(e.guid for e in redelivered) == sorted(lost)
        assert {e.status_code for e in redelivered} == {202}

        # Settled now: the next pass asks for nothing, and nothing ran twice.
        again = await redeliver_missed(h.rt)
        assert again.asked == [] and again.failed == 0
        for key in keys:
            assert len(await runs.runs_for(h.rt.db, key)) == 1
        assert sorted(e.guid for e in h.sim.webhooks.log.entries if e.redelivery) == sorted(lost)


async def test_a_delivery_the_bot_recorded_is_never_asked_for_again(tmp_path, db_url):
    async with app_bot(tmp_path, db_url) as h, _lossy_proxy(h.hook) as proxy:
        key, n = await _pr(h, "lossy")
        h.sim.configure_webhooks(proxy.url + "webhook", WEBHOOK_SECRET)
        comment = await h.sim.comment(REPO, n, "/converge", user="maint")
        await h.sim.settle()
        h.sim.configure_webhooks(h.hook, WEBHOOK_SECRET)
        await h.wait_status(key, *ACTIVE)
        [entry] = [e for e in h.sim.webhooks.log.entries if e.guid == _guid_of_comment(h, comment.id)]
        assert entry.status_code == 504  # GitHub saw a failure; the bot had recorded it

        for _ in range(2):
            report = await redeliver_missed(h.rt)
            assert (report.asked, report.failed, report.recorded) == ([], 1, 1)
        assert h.sim.counters.get(method="POST", route=ATTEMPTS) == 0
        await h.wait_for("the command settled", lambda: _settled(h, key))
        assert await _commands_of(h, key) == [(comment.id, "start", True)]


async def test_a_delivery_asked_for_the_most_times_is_not_asked_again(tmp_path, db_url, webhook_receiver):
    async with app_bot(tmp_path, db_url, redelivery_max_attempts=2) as h:
        key, n = await _pr(h, "refusing")
        webhook_receiver.status = 503  # the bot stays unreachable
        h.sim.configure_webhooks(webhook_receiver.url, WEBHOOK_SECRET)
        comment = await h.sim.comment(REPO, n, "/converge", user="maint")
        await h.sim.settle()
        guid = _guid_of_comment(h, comment.id)

        for _ in range(2):
            assert (await redeliver_missed(h.rt)).asked == [guid]
            await h.sim.settle()  # its redelivery is answered (503) and logged
        report = await redeliver_missed(h.rt)
        assert (report.asked, report.exhausted) == ([], [guid])
        # Given up on, it is left to the scan and the poll: the redelivery covers nothing now.
        assert not covers(h.rt)
        # A restart forgets what this process asked; the log itself says it was asked twice.
        h.rt.redelivery = None
        assert (await redeliver_missed(h.rt)).asked == []
        assert h.sim.counters.get(method="POST", route=ATTEMPTS) == 2
        assert [e.redelivery for e in h.sim.webhooks.log.for_guid(guid)] == [False, True, True]
        assert len(webhook_receiver.events("issue_comment", "created")) == 3


async def test_an_ask_not_yet_in_the_log_is_not_made_twice(tmp_path, db_url):
    async with app_bot(tmp_path, db_url) as h:
        key, n = await _pr(h, "slow")
        h.sim.webhook_faults(drop_next=1)
        comment = await h.sim.comment(REPO, n, "/converge", user="maint")
        h.sim.webhook_faults(delay=1.0)  # the redelivery waits in GitHub's queue
        guid = _guid_of_comment(h, comment.id)
        assert (await redeliver_missed(h.rt)).asked == [guid]
        second = await redeliver_missed(h.rt)
        assert (second.asked, second.waiting) == ([], [guid])
        h.sim.webhook_faults(delay=0.0)
        await h.wait_status(key, *ACTIVE)
        assert h.sim.counters.get(method="POST", route=ATTEMPTS) == 1


async def test_it_runs_at_start_and_on_its_interval_on_the_leader_only(tmp_path, db_url):
    async with app_bot(tmp_path, db_url, redelivery_interval_seconds=0.5) as h:
        key, n = await _pr(h, "scheduled")
        h.sim.webhook_faults(drop_next=1)
        await h.sim.comment(REPO, n, "/converge", user="maint")
        await h.wait_status(key, *ACTIVE)  # no one called it: the scheduled pass did
        assert h.sim.counters.get(method="GET", route="/app/hook/deliveries") >= 1

        leader, h.rt.leadership = h.rt.leadership, _Follower(h.rt.db)
        try:
            asked = h.sim.counters.get(method="GET", route="/app/hook/deliveries")
            assert await redeliver_missed(h.rt) is None
            assert h.sim.counters.get(method="GET", route="/app/hook/deliveries") == asked
        finally:
            h.rt.leadership = leader


async def test_with_a_token_and_no_hook_named_there_is_no_log_to_read(tmp_path, db_url):
    with structlog.testing.capture_logs() as logs:
        async with bot_on_simulator(tmp_path, db_url, **NO_SCAN) as h:
            assert await redeliver_missed(h.rt) is None
            assert not covers(h.rt) and not covers(h.rt, REPO)
            assert h.sim.counters.get(method="GET", route="/app/hook/deliveries") == 0
    off = [e for e in logs if e["event"].startswith("redelivery.")]
    assert [(e["event"], "[webhooks] hooks" in e["reason"]) for e in off] == [("redelivery.off", True)]


ORG_LOG = "/orgs/{org}/hooks/{hook_id}/deliveries"
REPO_LOG = "/repos/{owner}/{repo}/hooks/{hook_id}/deliveries"
OTHER = "acme/other"  # a repository of the same organisation


@asynccontextmanager
async def token_bot(tmp_path, db_url, hooks: dict[str, int], sections: dict | None = None, **webhooks):
    """The bot with a token, reading the delivery logs of `hooks` (the simulator's one webhook
    is hook 1, as an organisation's or a repository's); `OTHER` is a second repository."""
    async with bot_on_simulator(
        tmp_path, db_url, webhooks={"redelivery_interval_seconds": 3600, "hooks": hooks, **webhooks},
        **{**NO_SCAN, **(sections or {})},
    ) as h:
        await h.sim.create_repo(OTHER, files={"README.md": "# other\n"}, collaborators={"maint": "write"})
        # The pass at start-up came before OTHER was: this one reads every log to its end.
        await redeliver_missed(h.rt)
        stored = await cursors.load(h.rt.db, CURSOR)
        assert set(stored) == {Log.named(owner, i).cursor for owner, i in hooks.items()}
        yield h


async def test_with_a_token_an_organisations_hook_log_brings_back_lost_commands(tmp_path, db_url):
    """With a token, the bot reads the log of the organisation's webhook it was told of, with
    the token (each page a rate-limited request), and asks for what was lost through it."""
    async with token_bot(tmp_path, db_url, {"acme": 1}) as h:
        key, n = await _pr(h, "dropped")
        h.sim.webhook_faults(drop_next=1)
        comment = await h.sim.comment(REPO, n, "/converge", user="maint")
        await h.sim.settle()
        assert await h.view(key) is None
        h.sim.counters.reset()

        report = await redeliver_missed(h.rt)
        assert report.asked == [_guid_of_comment(h, comment.id)]
        assert covers(h.rt) and covers(h.rt, REPO) and covers(h.rt, OTHER)
        assert not covers(h.rt, "elsewhere/app")  # another owner's deliveries are not in it
        assert h.sim.counters.get(method="GET", route=ORG_LOG) == 1
        assert h.sim.counters.get(method="POST", route=ORG_LOG + "/{delivery_id}/attempts") == 1
        assert h.sim.counters.get(method="GET", route="/app/hook/deliveries") == 0
        await h.wait_status(key, *ACTIVE)
        await h.wait_for("the command settled", lambda: _settled(h, key))
        assert await _commands_of(h, key) == [(comment.id, "start", True)]
        stored = await cursors.load(h.rt.db, CURSOR)
        assert set(stored) == {f"{CURSOR}:orgs/acme/hooks/1"}

        await h.sim.settle()
        again = await redeliver_missed(h.rt)
        assert again.asked == [] and again.failed == 0
        assert len(await runs.runs_for(h.rt.db, key)) == 1


async def test_with_a_token_a_repositorys_hook_covers_that_repository_alone(tmp_path, db_url):
    """A repository's webhook holds only that repository's deliveries: its PRs rest on their
    webhooks, while a PR of another repository no hook's log holds is re-read every tick."""
    poller_config = {"interval_seconds": 3600, "fresh_read_seconds": 0, "repo_watch_min_prs": 0}
    async with token_bot(tmp_path, db_url, {REPO: 1},
                         sections={"poller": poller_config, "convergence": PATIENT}) as h:
        assert covers(h.rt, REPO) and not covers(h.rt, OTHER)
        keys = []
        for repo, head in ((REPO, "covered"), (OTHER, "uncovered")):
            pr = await h.sim.open_pr(repo, title=head, head=head, author="dev", files={"x.py": "X = 2\n"})
            keys.append(f"{repo}#{pr.number}")
        await _enrolled_and_waiting(h, keys)
        poller = Poller(h.rt)
        await poller.tick()  # never polled by this poller: each is due its full re-read
        await quiesce(h)
        for _ in range(2):
            await poller.tick()
            await quiesce(h)
            assert (poller.queued, poller.skipped) == (1, 1)

        # The other repository's delivery is not in this hook's log: it is not asked for.
        other = int(keys[1].split("#")[1])
        h.sim.webhook_faults(drop_next=1)
        await h.sim.comment(OTHER, other, "/cancel", user="maint")
        await h.sim.settle()
        h.sim.counters.reset()
        report = await redeliver_missed(h.rt)
        assert (report.asked, report.failed) == ([], 0)
        assert h.sim.counters.get(method="GET", route=REPO_LOG) == 1


async def test_a_hook_log_that_cannot_be_read_leaves_the_others_going_and_nothing_covered(tmp_path, db_url):
    """A hook's log that answers 404 (the hook deleted, a token without the rights): the other
    log is read and asked from all the same, and the redelivery covers nothing until both are
    read again, so the poll and the scan read as often as without it meanwhile."""
    async with token_bot(tmp_path, db_url, {"acme": 1, OTHER: 1}) as h:
        assert covers(h.rt) and covers(h.rt, REPO) and covers(h.rt, OTHER)
        key, n = await _pr(h, "dropped")
        h.sim.webhook_faults(drop_next=1)
        comment = await h.sim.comment(REPO, n, "/converge", user="maint")
        await h.sim.settle()
        h.sim.inject_fault(r"/repos/acme/other/hooks/1/deliveries$", method="GET", status=404, count=1)
        with structlog.testing.capture_logs() as logs, pytest.raises(NotFound):
            await redeliver_missed(h.rt)
        assert not covers(h.rt) and not covers(h.rt, REPO)
        unreadable = [e["log_name"] for e in logs if e["event"] == "redelivery.unreadable"]
        assert unreadable == [f"repos/{OTHER}/hooks/1"]
        assert h.sim.counters.get(method="POST", route=ORG_LOG + "/{delivery_id}/attempts") == 1
        await h.wait_status(key, *ACTIVE)
        await h.wait_for("the command settled", lambda: _settled(h, key))
        assert await _commands_of(h, key) == [(comment.id, "start", True)]

        report = await redeliver_missed(h.rt)  # both read again
        assert report.asked == [] and covers(h.rt, REPO) and covers(h.rt, OTHER)


async def test_with_a_token_the_scan_reads_only_the_repositories_no_hook_covers(tmp_path, db_url):
    scan_config = {"enabled": False, "repositories": [REPO, OTHER]}
    async with token_bot(tmp_path, db_url, {REPO: 1}, sections={"scan": scan_config}) as h:
        assert covers(h.rt)
        first = await scan(h.rt)
        assert not first.covered and first.repositories == 2
        h.sim.counters.reset()
        second = await scan(h.rt)
        assert not second.covered and second.repositories == 1
        assert h.sim.counters.get(method="GET", route="/repos/{owner}/{repo}/pulls") == 1
        assert all("acme/other" in path for _, path, _ in h.sim.counters.recent), h.sim.counters.recent


async def test_prs_waiting_for_a_review_rest_on_their_webhooks_while_redelivery_covers_them(tmp_path, db_url):
    """A PR that only waits for a review, in a repository too small to watch, is not re-read
    each tick while the App's redelivery recovers lost webhooks: the review whose webhook was
    lost comes back by redelivery. After a pass that failed, every tick re-reads it again."""
    poller_config = {"interval_seconds": 3600, "fresh_read_seconds": 0, "repo_watch_min_prs": 0}
    async with app_bot(tmp_path, db_url, sections={"poller": poller_config, "convergence": PATIENT}) as h:
        keys = [(await _pr(h, head))[0] for head in ("one", "two")]
        await _enrolled_and_waiting(h, keys)
        assert covers(h.rt)  # the pass at start-up read the whole log
        poller = Poller(h.rt)

        async def tick() -> None:
            await poller.tick()
            await quiesce(h)

        await tick()  # never polled by this poller: each is due its full re-read
        h.sim.counters.reset()
        await tick()
        assert (poller.queued, poller.skipped) == (0, 2)
        assert h.sim.counters.total() == 0, h.sim.counters.recent

        number = int(keys[0].split("#")[1])
        h.sim.webhook_faults(drop_next=1)
        review = await h.sim.submit_review(REPO, number, user=COPILOT, body="LGTM", state="COMMENTED")
        await h.sim.settle()
        await tick()
        assert poller.skipped == 2 and (await h.view(keys[0])).pr.latest_review_id != review.id
        assert (await redeliver_missed(h.rt)).asked  # the lost review webhook, sent again
        await h.wait_for("the redelivered review", lambda: _review_seen(h, keys[0], review.id))

        # A pass that fails leaves nothing covered: the PRs are re-read each tick again.
        h.sim.inject_fault(r"/app/hook/deliveries$", method="GET", status=404, count=1)
        with pytest.raises(GitHubError):
            await redeliver_missed(h.rt)
        assert not covers(h.rt)
        await tick()
        assert poller.skipped == 0 and keys[1] in poller.polled_at


async def test_a_scan_runs_at_most_every_covered_interval_while_redelivery_covers(tmp_path, db_url):
    """What a scan finds, a redelivery brings too, unless GitHub never attempted the delivery:
    while the redelivery covers, the scan reads at most every `covered_interval_seconds`."""
    async with app_bot(tmp_path, db_url) as h:  # the scan's schedule is off: run here
        assert covers(h.rt)
        first = await scan(h.rt)
        assert not first.covered and first.repositories == 1
        h.sim.counters.reset()
        second = await scan(h.rt)
        assert second.covered and h.sim.counters.total() == 0, h.sim.counters.recent
        # The interval over, it reads again.
        h.rt.scan_started_at -= h.rt.config.scan.covered_interval_seconds
        assert not (await scan(h.rt)).covered
        assert (await scan(h.rt)).covered
        # So does the scan after a pass that failed.
        h.sim.inject_fault(r"/app/hook/deliveries$", method="GET", status=404, count=1)
        with pytest.raises(GitHubError):
            await redeliver_missed(h.rt)
        h.sim.counters.reset()
        third = await scan(h.rt)
        assert not third.covered and third.repositories == 1
        assert h.sim.counters.get(method="GET", route="/repos/{owner}/{repo}/pulls") == 1


async def test_a_pr_at_work_in_a_round_rests_while_redelivery_covers_it(tmp_path, db_url):
    """While its fixer works, a PR changes on GitHub by our own writes (the replies, the check
    run) or by what sends a webhook: no tick re-reads it while the redelivery covers, and each
    tick does once it does not."""
    fixer = HeldFixer()
    poller_config = {"interval_seconds": 3600, "fresh_read_seconds": 0}
    async with app_bot(tmp_path, db_url, sections={"poller": poller_config}, fixer=fixer) as h:
        h.sim.set_reviewer(REPO, steps(1, 0))
        key, _ = await open_and_enroll(h)
        await h.wait_for("the fixer at work", fixer.at_work)
        assert (await h.view(key)).derived_status == "converging"
        poller = Poller(h.rt)
        try:
            await poller.tick()  # never polled by this poller: due its full re-read
            await h.wait_for("all but the fix done", lambda: _only_the_fix_left(h))
            h.sim.counters.reset()
            await poller.tick()
            assert (poller.queued, poller.skipped) == (0, 1)
            await h.wait_for("all but the fix done", lambda: _only_the_fix_left(h))
            assert h.sim.counters.total() == 0, h.sim.counters.recent

            h.rt.redelivery.of(APP_LOG).covered_at = None  # as after a pass that failed
            await poller.tick()
            assert (poller.queued, poller.skipped) == (1, 0)
        finally:
            fixer.release.set()
        await h.wait_status(key, "waiting_review", "merged", "waiting_merge")


async def test_a_late_first_review_request_looks_unless_a_review_since_would_have_been_heard(tmp_path, db_url,
                                                                                     monkeypatch):
    """A first try of a review request run long after its decision (a long queue) asks at once
    while the App's redelivery covers and nothing tells of a review since: no webhook-woken sync
    of the PR waiting (other work of it does not tell of one), no review on the row past the
    decision's newest. A sync waiting, a review a read recorded, or no cover, and it looks
    first; finding the head reviewed, it asks nobody."""
    import json

    from bot.effects.review_request import REVIEW_LOOK_AFTER
    from bot.effects.runner import run_effect
    from storage import jobs
    from storage.models import utcnow

    # No poll ticks (every 2 s here): a tick's sync of the PR would be one in hand.
    poller = {"interval_seconds": 3600}
    async with app_bot(tmp_path, db_url, sections={"convergence": PATIENT, "poller": poller}) as h:
        key, number = await _pr(h, "one")
        r = await h.http.post("/api/prs", json={"pr": key}, headers={"Authorization": "Bearer api-token"})
        assert r.status_code == 201, r.text
        await h.wait_status(key, "waiting_review")
        await quiesce(h)

        async def no_sync_in_hand() -> bool:
            # A webhook of the enrollment (its review request, say) may have woken a sync due
            # after the quiesce's window; the quiet case starts once it ran.
            return not await jobs.in_hand(h.rt.db, key, kinds=("sync",))

        await h.wait_for("the PR's syncs done", no_sync_in_hand)
        assert covers(h.rt)
        view = await h.view(key)
        head, newest = view.pr.head_sha, view.pr.latest_review_id

        def count(method: str, suffix: str) -> int:
            return sum(1 for m, path, _ in h.sim.counters.recent
                       if m == method and path.endswith(f"/pulls/{number}/{suffix}"))

        async def request(tag: str, baseline: int | None) -> tuple[int, int]:
            """Run a first try decided two look windows ago: (reviews read, Copilot asked)."""
            h.sim.counters.reset()
            decided = utcnow() - 2 * REVIEW_LOOK_AFTER
            await run_effect(h.rt, Job(
                kind="effect", pr_key=key, key=f"rr-{tag}", status="running", run_at=decided,
                created_at=decided, attempts=1, payload=json.dumps({
                    "effect": "request_review", "head": head, "baseline": baseline,
                    "reviews_known_at": decided.isoformat()})))
            return count("GET", "reviews"), count("POST", "copilot-code-review")

        # The decisions below are this process's, made long ago: its memory holds them.
        monkeypatch.setattr(outbox.MEMORY, "since", utcnow() - 3 * REVIEW_LOOK_AFTER)
        assert await request("quiet", newest) == (0, 1)
        # Other work of the PR in hand (an effect, not a sync a webhook woke) tells of no review.
        await jobs.enqueue(h.rt.db, "effect", f"other:{key}", pr_key=key, delay_seconds=3600)
        assert await request("other work", newest) == (0, 1)

        # Copilot reviews the head; its webhook woke a sync not yet run (as intake queues it).
        h.sim.webhook_faults(drop_next=1)
        review = await h.sim.submit_review(REPO, number, user=COPILOT, body="LGTM", state="COMMENTED",
                                           commit_id=head)
        await h.sim.settle()
        await jobs.enqueue(h.rt.db, "sync", f"sync:{key}:held", pr_key=key, delay_seconds=3600)
        assert await request("sync waiting", newest) == (1, 0)

        # The sync ran: the row shows the review past the decision's newest.
        async with h.rt.db.session() as s:
            await s.exec(update(Job).where(Job.key == f"sync:{key}:held").values(run_at=utcnow()))
        h.rt.wake_workers()
        await h.wait_for("the review read", lambda: _review_seen(h, key, review.id))
        await quiesce(h)
        assert await request("review recorded", newest) == (1, 0)

        # Decided knowing that review: nothing tells of another, so it asks at once again;
        # not once the redelivery stops covering (as after a pass that failed).
        assert await request("knew it", review.id) == (0, 1)
        h.rt.redelivery.of(APP_LOG).covered_at = None
        assert await request("uncovered", review.id) == (1, 1)


async def _only_the_fix_left(h) -> bool:
    """Webhooks delivered, and no job due but the held fix job queued or running."""
    await h.sim.settle()
    async with h.rt.db.session() as s:
        left = (await s.exec(select(Job.kind).where(
            Job.status.in_(["queued", "running"]), Job.run_at <= due_soon()))).all()
    return list(left) == ["fix"]


async def _review_seen(h, key: str, review_id: int) -> bool:
    return (await h.view(key)).pr.latest_review_id == review_id


class _Follower(Leadership):
    """A replica another one leads."""

    async def holds(self) -> bool:
        return False


@asynccontextmanager
async def _lossy_proxy(target: str):
    """Hands each delivery to the bot, then answers GitHub 504 as a proxy that timed out."""
    async with httpx.AsyncClient(timeout=10) as client:
        async def forward(request: Request) -> Response:
            headers = {k: v for k, v in request.headers.items() if k.lower().startswith("x-")}
            await client.post(target, content=await request.body(),
                              headers={**headers, "content-type": "application/json"})
            return Response(status_code=504)

        server = AsgiServer(Starlette(routes=[Route("/webhook", forward, methods=["POST"])]))
        await server.start()
        try:
            yield server
        finally:
            await server.stop()


# -- what a pass that GitHub refused covers ------------------------------------------------
# `covers` lets PRs rest on their webhooks and the scan run less often: only a pass that read
# its log whole and asked for everything missed, none of it given up on or refused, covers.

ATTEMPTS_PATH = r"/app/hook/deliveries/\d+/attempts$"


async def _lost_commands(h, *heads: str) -> list[tuple[str, str]]:
    """A `/converge` on a new PR for each head, each delivery lost: (PR key, its guid)."""
    lost = []
    for head in heads:
        key, n = await _pr(h, head)
        h.sim.webhook_faults(drop_next=1)
        comment = await h.sim.comment(REPO, n, "/converge", user="maint")
        lost.append((key, _guid_of_comment(h, comment.id)))
    await h.sim.settle()
    return lost


@pytest.mark.parametrize("status", [404, 405], ids=["gone", "refused"])
async def test_a_delivery_github_will_not_send_again_leaves_the_log_uncovered_and_is_not_asked_again(
        tmp_path, db_url, status):
    """GitHub answers the ask 404 (the delivery is gone) or 405/422 (it will not send it): the
    pass asked for everything, but what it lost is left to the scan and the poll, so it covers
    nothing; and it is not asked for again on the next pass."""
    async with app_bot(tmp_path, db_url) as h:
        [(key, guid)] = await _lost_commands(h, "gone")
        assert covers(h.rt)  # the pass at start-up
        h.sim.inject_fault(ATTEMPTS_PATH, method="POST", status=status)
        report = await redeliver_missed(h.rt)
        assert (report.asked, report.failed) == ([], 1)
        assert not covers(h.rt) and not covers(h.rt, REPO)
        again = await redeliver_missed(h.rt)
        assert again.asked == [] and again.failed == 1
        assert h.sim.counters.get(method="POST", route=ATTEMPTS) == 1
        assert [e.redelivery for e in h.sim.webhooks.log.for_guid(guid)] == [False]
        assert await h.view(key) is None  # nothing brought it back (the scan is off here)


@pytest.mark.parametrize("status", [502, 403], ids=["unavailable", "rate-limited"])
async def test_a_pass_whose_ask_failed_covers_nothing_and_asks_once_the_ask_is_taken_as_lost(
        tmp_path, db_url, status, monkeypatch):
    """The first ask answers 502 (or 403, rate limited): the pass stops asking, covers nothing,
    and counts the ask as made (GitHub may have taken it). The next pass asks for the others but
    waits for that one; once the wait is over it is asked for again, and both commands land."""
    from bot.intake import redelivery

    async with app_bot(tmp_path, db_url) as h:
        (first_key, first), (second_key, second) = await _lost_commands(h, "first", "second")
        h.sim.inject_fault(ATTEMPTS_PATH, method="POST", status=status, count=1)
        report = await redeliver_missed(h.rt)
        assert report.asked == [] and not covers(h.rt)
        assert h.sim.counters.get(method="POST", route=ATTEMPTS) == 1  # the pass stopped there

        after = await redeliver_missed(h.rt)
        assert (after.asked, after.waiting) == ([second], [first])
        assert h.sim.counters.get(method="POST", route=ATTEMPTS) == 2
        await h.wait_status(second_key, *ACTIVE)
        assert await h.view(first_key) is None

        monkeypatch.setattr(redelivery, "PENDING_SECONDS", 0.0)  # the ask's wait is over
        last = await redeliver_missed(h.rt)
        assert last.asked == [first] and covers(h.rt)
        await h.wait_status(first_key, *ACTIVE)
        await h.sim.settle()
        for guid in (first, second):
            assert [e.redelivery for e in h.sim.webhooks.log.for_guid(guid)] == [False, True]


async def test_a_pass_that_did_not_read_its_log_to_the_cursor_covers_nothing(tmp_path, db_url, monkeypatch):
    """More entries since the cursor than a pass reads: what it did not read may hold lost
    deliveries, so it covers nothing."""
    from bot.intake import redelivery

    async with app_bot(tmp_path, db_url) as h:
        await _lost_commands(h, "one", "two")
        assert covers(h.rt)
        monkeypatch.setattr(redelivery, "PAGE_SIZE", 1)
        monkeypatch.setattr(redelivery, "MAX_PAGES", 1)
        report = await redeliver_missed(h.rt)
        assert report.pages == 1 and len(report.asked) == 1
        assert not covers(h.rt)


async def test_more_missed_deliveries_than_a_pass_asks_for_leave_the_log_uncovered(tmp_path, db_url):
    """A pass asks for at most MAX_ASKS_PER_RUN deliveries: with more missed, the rest wait
    for the next pass, and the log is not covered until they were asked for."""
    from bot.intake.redelivery import MAX_ASKS_PER_RUN

    async with app_bot(tmp_path, db_url) as h:
        _key, n = await _pr(h, "chatty")
        h.sim.webhook_faults(drop_next=MAX_ASKS_PER_RUN + 1)
        for i in range(MAX_ASKS_PER_RUN + 1):
            await h.sim.comment(REPO, n, f"note {i}", user="dev")
        await h.sim.settle()
        first = await redeliver_missed(h.rt)
        assert (len(first.asked), first.failed) == (MAX_ASKS_PER_RUN, MAX_ASKS_PER_RUN + 1)
        assert not covers(h.rt)
        await h.sim.settle()  # the redeliveries asked for are sent
        second = await redeliver_missed(h.rt)
        assert len(second.asked) == 1 and second.asked[0] not in first.asked
        assert covers(h.rt)


async def test_a_pass_that_fails_on_anything_else_leaves_the_log_uncovered(tmp_path, db_url, monkeypatch):
    """Not only GitHub's errors: a pass that fails on the database (or a bug) has not recovered
    what was lost since the last one, so the cover of that last one ends with it."""
    from types import SimpleNamespace

    from bot.intake import redelivery

    async def unavailable(_db, _guids):
        raise ConnectionError("the database is not answering")

    async with app_bot(tmp_path, db_url) as h:
        await _lost_commands(h, "lost")
        assert covers(h.rt)
        real = redelivery.deliveries
        monkeypatch.setattr(redelivery, "deliveries", SimpleNamespace(seen=unavailable))
        with pytest.raises(ConnectionError):
            await redeliver_missed(h.rt)
        assert not covers(h.rt)
        monkeypatch.setattr(redelivery, "deliveries", real)
        assert len((await redeliver_missed(h.rt)).asked) == 1 and covers(h.rt)


async def test_a_log_page_whose_entries_cannot_be_read_is_read_past_and_keeps_the_cursor(tmp_path, db_url):
    """A page of entries with no readable time (or guid, or id) is skipped, not a crash, and
    moves the cursor past nothing: the lost delivery on it is asked for by the next pass."""
    async with app_bot(tmp_path, db_url) as h:
        [(key, guid)] = await _lost_commands(h, "unreadable")
        h.sim.inject_fault(r"/app/hook/deliveries$", method="GET", rewrite="wrong_types", count=1)
        report = await redeliver_missed(h.rt)
        assert report.entries >= 2 and (report.asked, report.failed) == ([], 0)
        after = await redeliver_missed(h.rt)
        assert after.asked == [guid]
        await h.wait_status(key, *ACTIVE)
