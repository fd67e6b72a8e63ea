"""The rate-limit budget's bookkeeping and pacing arithmetic (no I/O)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from bot.github.ratebudget import ASSUMED_LIMIT, IDLE, NEWS, UNMETERED, RateBudget

T0 = 1_800_000_000.0  # epoch seconds
RESET = T0 + 3600


def budget(remaining: int = 5000, *, limit: int = 5000, reset: float = RESET, **kw) -> RateBudget:
    b = RateBudget(clock=lambda: T0, **kw)
    b.observe("core", limit, remaining, reset, now=T0)
    return b


def headers(limit=5000, remaining=4990, reset=int(RESET), used=None, resource="core", **extra) -> dict:
    h = {"x-ratelimit-limit": str(limit), "x-ratelimit-remaining": str(remaining),
         "x-ratelimit-reset": str(reset), "x-ratelimit-used": str(limit - remaining if used is None else used),
         "x-ratelimit-resource": resource}
    h.update(extra)
    return h


# -- observing ------------------------------------------------------------------------------------

def test_headers_are_recorded_per_resource():
    b = RateBudget(clock=lambda: T0)
    assert b.observe_headers(headers(remaining=4990), status=200)
    assert b.observe_headers(headers(remaining=4999, resource="graphql"), status=200)
    snap = b.snapshot()
    assert snap["core"] == {"limit": 5000, "remaining": 4990, "used": 10, "reset": int(RESET),
                            "reset_in_seconds": 3600.0, "reserve": 1000, "assumed": False, "observed_at": T0}
    assert snap["graphql"]["remaining"] == 4999


def test_an_older_answer_in_the_same_window_is_ignored():
    """Answers to concurrent requests arrive in any order: the balance only goes down."""
    b = budget(4900)
    assert not b.observe("core", 5000, 4950, RESET, now=T0 + 1)
    assert b.bucket("core").remaining == 4900
    assert b.observe("core", 5000, 4899, RESET, now=T0 + 2)
    assert b.bucket("core").remaining == 4899


def test_a_new_window_replaces_the_old_and_an_answer_from_the_old_one_is_ignored():
    b = budget(10)
    assert b.observe("core", 5000, 4999, RESET + 3600, now=T0 + 3601)
    assert b.bucket("core", now=T0 + 3601).remaining == 4999
    assert not b.observe("core", 5000, 3, RESET, now=T0 + 3602)  # a late answer from the old window
    assert b.bucket("core", now=T0 + 3602).remaining == 4999


def test_a_reset_a_second_off_is_the_same_window():
    b = budget(100)
    assert b.observe("core", 5000, 99, RESET - 1, now=T0 + 1)
    assert not b.observe("core", 5000, 150, RESET + 1, now=T0 + 2)
    assert b.bucket("core").remaining == 99


def test_secondary_limit_answers_and_garbage_are_not_recorded():
    b = budget(4000)
    # A secondary limit (Retry-After) need not report the primary budget.
    assert not b.observe_headers(headers(remaining=0, reset=int(T0 + 30), **{"retry-after": "30"}), status=429)
    assert not b.observe_headers(headers(remaining="lots", used=0), status=200)
    assert b.bucket("core").remaining == 4000


def test_past_the_reset_the_window_is_assumed_full():
    b = budget(0)
    assert not b.may_spend(NEWS, T0 + 10)
    after = b.bucket("core", now=RESET + 5)
    assert after.assumed and after.remaining == after.limit == 5000
    assert b.may_spend(NEWS, RESET + 5)


def test_a_limit_that_never_comes_means_unmetered():
    """GHES with rate limiting off sends no x-ratelimit headers: nothing to pace."""
    b = RateBudget(clock=lambda: T0)
    b.observe_headers({}, status=404)  # an error says nothing
    assert not b.unmetered
    b.observe_headers({}, status=200)
    assert b.unmetered and b.idle_allowance() == UNMETERED and b.may_spend(IDLE)
    b.observe_headers(headers(remaining=3000), status=200)
    assert not b.unmetered and b.idle_allowance() < UNMETERED


def test_datetimes_and_epoch_seconds_are_both_accepted():
    b = budget(4000)
    assert b.idle_allowance(datetime.fromtimestamp(T0, UTC)) == b.idle_allowance(T0)


# -- pacing ---------------------------------------------------------------------------------------

def test_the_idle_allowance_spreads_what_is_above_the_reserve_over_the_time_left():
    # 5000 limit, 20% reserve = 1000; 4600 left: 3600 spendable over 3600 s, 60 s per slice.
    b = budget(4600)
    assert b.reserve() == 1000
    assert b.idle_allowance(T0) == 60
    assert b.idle_allowance(T0, slice_seconds=30) == 30
    # Half the window gone, same balance: twice the pace.
    assert b.idle_allowance(T0 + 1800) == 120
    # In the last slice, everything above the reserve.
    assert b.idle_allowance(RESET - 30) == 3600


def test_the_idle_allowance_counts_reads_of_a_given_cost():
    b = budget(4600)
    assert b.idle_allowance(T0, cost=3) == 20  # 60 requests, 3 per re-read
    assert b.idle_allowance(T0, cost=7) == 8
    with pytest.raises(ValueError):
        b.idle_allowance(T0, cost=0)


def test_no_idle_allowance_at_or_below_the_reserve():
    assert budget(1000).idle_allowance(T0) == 0
    assert budget(500).idle_allowance(T0) == 0
    assert budget(0).idle_allowance(RESET - 1) == 0


def test_the_reserve_is_configurable():
    b = budget(4600, reserve_fraction=0.5)
    assert b.reserve() == 2500
    assert b.idle_allowance(T0) == 35  # (4600 - 2500) * 60 / 3600
    b.configure(reserve_fraction=0.0)
    assert b.idle_allowance(T0) == 76
    with pytest.raises(ValueError):
        b.configure(reserve_fraction=1.0)
    with pytest.raises(ValueError):
        b.configure(slice_seconds=0)


def test_following_the_allowance_every_slice_never_touches_the_reserve():
    """Spend exactly what is allowed each poll interval for a whole window, each idle re-read
    costing its full price (no 304s): the balance ends at the reserve, never below, and the
    spending is even (no slice gets more than twice the first one's)."""
    limit, slice_s, cost = 5000, 60.0, 3
    b = RateBudget(clock=lambda: T0)
    remaining = limit
    b.observe("core", limit, remaining, RESET, now=T0)
    spent_per_slice = []
    t = T0
    while t < RESET:
        reads = b.idle_allowance(t, cost=cost)
        remaining -= reads * cost
        spent_per_slice.append(reads * cost)
        b.observe("core", limit, remaining, RESET, now=t)
        t += slice_s
    assert remaining >= b.reserve()
    assert remaining - b.reserve() < 3 * cost  # the rest was spent, not hoarded
    assert max(spent_per_slice) <= 2 * spent_per_slice[0] + cost


def test_news_spending_shrinks_the_idle_allowance_first():
    b = budget(4600)
    before = b.idle_allowance(T0)
    b.observe("core", 5000, 2000, RESET, now=T0)  # news spent 2600
    assert b.idle_allowance(T0) < before
    assert b.idle_allowance(T0) == 16  # (2000 - 1000) * 60 / 3600


def test_may_spend_lets_news_use_the_reserve_and_idle_work_not():
    b = budget(1001)
    assert b.may_spend(IDLE) and b.may_spend(NEWS)
    b.observe("core", 5000, 1000, RESET, now=T0)
    assert not b.may_spend(IDLE)
    assert b.may_spend(NEWS)
    assert b.exhausted_for(IDLE, T0) == 3600 and b.exhausted_for(NEWS, T0) == 0
    b.observe("core", 5000, 0, RESET, now=T0)
    assert not b.may_spend(NEWS)
    assert b.exhausted_for(NEWS, T0 + 600) == 3000
    with pytest.raises(ValueError):
        b.may_spend("urgent")


def test_other_resources_are_paced_apart():
    b = budget(4600)
    b.observe("graphql", 5000, 900, RESET, now=T0)
    assert b.idle_allowance(T0) == 60
    assert b.idle_allowance(T0, resource="graphql") == 0
    assert not b.may_spend(IDLE, resource="graphql") and b.may_spend(IDLE)


def test_before_any_answer_a_full_default_window_is_assumed():
    """The first poll after a start must not spend the whole hour at once (the cache is cold)."""
    b = RateBudget(clock=lambda: T0)
    assert b.bucket("core") is None and b.snapshot() == {}
    assert b.may_spend(IDLE) and b.may_spend(NEWS)
    expected = int((ASSUMED_LIMIT * 0.8) * 60 / 3600)
    assert b.idle_allowance(T0) == expected
