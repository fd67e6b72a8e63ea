"""What a pass over the delivery log asks for, how far it settles the log (pure), and how its
pages are read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from bot.github.errors import GitHubError
from bot.intake.redelivery import APP_LOG, SETTLE_MARGIN, _read, decide, group

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
SINCE = T0 - timedelta(hours=1)


def entry(n: int, guid: str, minutes: float, status: int, *, redelivery: bool = False,
          event: str = "issue_comment") -> dict:
    at = (T0 + timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"id": n, "guid": guid, "delivered_at": at, "redelivery": redelivery, "status_code": status,
            "event": event, "action": "created"}


def plan(entries, *, recorded=(), pending=None, refused=(), max_attempts=3, per_run=50, complete=True):
    guids = group(entries, SINCE)
    stamps = [datetime.fromisoformat(e["delivered_at"].replace("Z", "+00:00")) for e in entries]
    return decide(guids, recorded=set(recorded), pending=pending or {}, refused=set(refused),
                  max_attempts=max_attempts, since=SINCE, newest_at=max(stamps, default=None),
                  complete=complete, oldest_at=min(stamps, default=None), per_run=per_run)


def test_a_guid_any_attempt_delivered_needs_nothing_and_the_cursor_trails_the_newest_entry():
    p = plan([entry(2, "a", 1, 202, redelivery=True), entry(1, "a", 0, 503)])
    assert p.ask == [] and p.cursor == T0 + timedelta(minutes=1) - SETTLE_MARGIN


def test_failed_guids_are_asked_oldest_first_by_their_newest_entry_and_hold_the_cursor():
    p = plan([entry(4, "b", 30, 0), entry(3, "a", 20, 503, redelivery=True), entry(2, "b", 10, 0),
              entry(1, "a", 5, 503)])
    assert [(g.guid, g.newest_id, g.redeliveries) for g in p.ask] == [("a", 3, 1), ("b", 4, 0)]
    assert p.cursor == T0 + timedelta(minutes=5)


def test_recorded_refused_and_exhausted_guids_are_not_asked_and_do_not_hold_the_cursor():
    p = plan([entry(9, "x", 40, 200), entry(4, "gone", 4, 0), entry(3, "ours", 3, 504),
              entry(2, "tired", 2, 503, redelivery=True), entry(1, "tired", 1, 503)],
             recorded={"ours"}, refused={"gone"}, max_attempts=1)
    assert p.ask == [] and [g.guid for g in p.exhausted] == ["tired"]
    assert p.cursor == T0 + timedelta(minutes=40) - SETTLE_MARGIN


def test_an_ask_not_yet_in_the_log_waits_and_holds_the_cursor():
    p = plan([entry(2, "x", 40, 200), entry(1, "a", 1, 0)], pending={"a": 1})
    assert p.ask == [] and [g.guid for g in p.waiting] == ["a"]
    assert p.cursor == T0 + timedelta(minutes=1)


def test_asks_beyond_the_runs_share_wait_for_the_next_run_and_hold_the_cursor():
    p = plan([entry(n, f"g{n}", n, 0) for n in range(1, 6)], per_run=2)
    assert [g.guid for g in p.ask] == ["g1", "g2"]
    assert p.cursor == T0 + timedelta(minutes=1)


def test_entries_before_the_cursor_are_left_out_and_the_cursor_never_goes_back():
    old = entry(1, "a", -120, 0)  # before SINCE: settled in an earlier pass
    p = plan([old])
    assert p.ask == [] and p.cursor == SINCE


def test_intent_events_are_asked_before_older_syncs():
    p = plan([entry(3, "comment", 30, 0), entry(2, "push", 2, 0, event="push"),
              entry(1, "check", 1, 0, event="check_run")], per_run=2)
    assert [g.guid for g in p.ask] == ["comment", "check"]
    assert p.cursor == T0 + timedelta(minutes=1)


def test_a_read_that_stopped_short_moves_the_cursor_to_the_oldest_entry_read():
    # More entries than a run reads: without moving on, every run would read the same pages.
    p = plan([entry(2, "b", 50, 200), entry(1, "a", 40, 200)], complete=False)
    assert p.cursor == T0 + timedelta(minutes=40)
    held = plan([entry(2, "b", 50, 200), entry(1, "a", 40, 0)], complete=False)
    assert [g.guid for g in held.ask] == ["a"] and held.cursor == T0 + timedelta(minutes=40)


def test_a_malformed_entry_is_left_out_and_the_rest_still_asked():
    good = entry(1, "a", 0, 503)
    bad = [{"guid": "b", "delivered_at": good["delivered_at"], "status_code": 503},  # no id
           {**entry(3, "c", 0, 503), "id": "3"}, {**entry(4, "d", 0, 503), "id": True},
           {**entry(5, "e", 0, 503), "guid": None}, {**entry(6, "f", 0, 503), "delivered_at": 7},
           {**entry(7, "g", 0, "503")}]
    guids = group([good, *bad], SINCE)
    assert set(guids) == {"a", "g"} and not guids["g"].delivered
    assert [g.guid for g in plan([good, bad[-1]]).ask] == ["a", "g"]


async def test_a_page_of_nothing_readable_is_read_past_and_a_page_that_is_no_list_fails_the_pass():
    """The reading of the log's pages, fed its pages by a stand-in for the client's one call
    (the simulator never serves a malformed page): a page whose entries are none of them
    objects is not the log's end, and the entries past it are still read."""
    pages = {None: (["junk", 7], "c2"), "c2": ([entry(1, "a", 10, 503)], None)}

    async def hook_deliveries(*, per_page, cursor, hook):
        return pages[cursor]

    rt = SimpleNamespace(github=SimpleNamespace(hook_deliveries=hook_deliveries))
    entries, read, complete = await _read(rt, APP_LOG, SINCE)
    assert [e["guid"] for e in entries] == ["a"] and read == 2 and complete

    pages[None] = ({"message": "not a list"}, None)
    with pytest.raises(GitHubError, match="not a list"):
        await _read(rt, APP_LOG, SINCE)
