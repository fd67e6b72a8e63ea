"""Seeded webhook chaos (drop, duplicate, reorder, delay by rate) and a receiver that is down."""

from __future__ import annotations

import socket

import pytest

from tests.simulator_fixtures import WEBHOOK_SECRET

REPO = "acme/widgets"


@pytest.fixture
async def pr(sim, webhook_receiver):
    await sim.create_repo(REPO)
    pr = await sim.open_pr(REPO, title="T", head="h", files={"a.txt": "a"}, author="alice")
    sim.configure_webhooks(webhook_receiver.url, WEBHOOK_SECRET)
    await sim.settle()
    return pr


async def _comment(sim, pr, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        await sim.comment(REPO, pr.number, f"c{i}", user="bob")


def _bodies(received) -> list[str]:
    return [r.payload["comment"]["body"] for r in received]


def _flags(deliveries) -> list[tuple[bool, bool, bool]]:
    return [(d.dropped, d.duplicate, d.reordered) for d in deliveries]


async def test_rates_of_zero_change_nothing(sim, pr, webhook_receiver):
    sim.webhook_chaos(1)
    await _comment(sim, pr, 3)
    await sim.settle()
    assert _bodies(webhook_receiver.events("issue_comment")) == ["c0", "c1", "c2"]
    assert sim.webhook_chaos_counts == {}


async def test_drop_rate_one_delivers_nothing(sim, pr, webhook_receiver):
    sim.webhook_chaos(2, drop_rate=1.0)
    await _comment(sim, pr, 3)
    await sim.settle()
    assert webhook_receiver.events("issue_comment") == []
    assert [d.dropped for d in sim.webhooks.find("issue_comment")] == [True] * 3
    assert sim.webhook_chaos_counts == {"dropped": 3}


async def test_duplicate_rate_one_sends_each_twice_with_one_id(sim, pr, webhook_receiver):
    sim.webhook_chaos(3, duplicate_rate=1.0)
    await _comment(sim, pr, 2)
    got = await webhook_receiver.wait_for("issue_comment", count=4)
    assert _bodies(got) == ["c0", "c0", "c1", "c1"]
    assert got[0].delivery == got[1].delivery != got[2].delivery
    assert sim.webhook_chaos_counts == {"duplicated": 2}


async def test_a_reordered_delivery_is_overtaken_by_the_next(sim, pr, webhook_receiver):
    sim.webhook_chaos(4, reorder_rate=1.0, reorder_window=30)
    await _comment(sim, pr, 1)
    sim.webhook_chaos_off()
    await _comment(sim, pr, 1, start=1)
    got = await webhook_receiver.wait_for("issue_comment", count=2)
    assert _bodies(got) == ["c1", "c0"]
    assert [d.reordered for d in sim.webhooks.find("issue_comment")] == [True, False]


async def test_held_deliveries_go_out_after_the_window_when_nothing_follows(sim, pr,
                                                                           webhook_receiver):
    sim.webhook_chaos(5, reorder_rate=1.0, reorder_window=0.2)
    await _comment(sim, pr, 3)
    got = await webhook_receiver.wait_for("issue_comment", count=3, timeout=10)
    assert sorted(_bodies(got)) == ["c0", "c1", "c2"]
    assert sim.webhook_chaos_counts == {"reordered": 3}


async def test_same_seed_gives_the_same_delivery_faults(sim, pr):
    rates = {"drop_rate": 0.3, "duplicate_rate": 0.3, "reorder_rate": 0.3,
             "reorder_window": 0.05}
    sim.webhook_chaos(6, **rates)
    await _comment(sim, pr, 20)
    await sim.settle()
    first = _flags(sim.webhooks.find("issue_comment"))
    sim.webhook_chaos(6, **rates)
    await _comment(sim, pr, 20, start=20)
    await sim.settle()
    assert _flags(sim.webhooks.find("issue_comment")[20:]) == first
    assert len(set(first)) > 2


async def test_delay_max_spreads_deliveries_and_records_the_delay(sim, pr, webhook_receiver):
    sim.webhook_chaos(7, delay_max=0.1)
    await _comment(sim, pr, 3)
    await webhook_receiver.wait_for("issue_comment", count=3)
    delays = [d.delay for d in sim.webhooks.find("issue_comment")]
    assert all(0 < d <= 0.1 for d in delays)
    assert sim.webhook_chaos_counts == {"delayed": 3}


async def test_webhook_chaos_over_the_control_api(api, sim, pr, webhook_receiver):
    started = await api.put("_sim/webhooks/chaos", json={"seed": 8, "drop_rate": 1.0})
    assert started.status_code == 200 and started.json()["settings"]["drop_rate"] == 1.0
    await _comment(sim, pr, 1)
    seen = (await api.get("_sim/webhooks/chaos")).json()
    assert seen["counts"] == {"dropped": 1} and seen["deliveries"] == 1
    listed = (await api.get("_sim/deliveries", params={"event": "issue_comment"})).json()
    assert listed[0]["dropped"] and "delay" in listed[0]
    assert not (await api.delete("_sim/webhooks/chaos")).json()["enabled"]
    await _comment(sim, pr, 1, start=1)
    assert _bodies(await webhook_receiver.wait_for("issue_comment")) == ["c1"]
    bad = await api.put("_sim/webhooks/chaos", json={"seed": 1, "drop_rate": -0.1})
    assert bad.status_code == 422


def _refused_url() -> str:
    """A local URL nothing listens on (as while a SIGKILLed bot restarts)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/webhook"


async def test_a_receiver_that_is_down_is_recorded_and_does_not_block(sim, pr,
                                                                     webhook_receiver):
    sim.configure_webhooks(_refused_url(), WEBHOOK_SECRET)
    await _comment(sim, pr, 3)
    await sim.settle()
    refused = sim.webhooks.find("issue_comment")
    assert all(d.status is None and d.attempts and d.attempts[-1].error for d in refused)
    sim.configure_webhooks(webhook_receiver.url, WEBHOOK_SECRET)
    await _comment(sim, pr, 1, start=3)
    assert _bodies(await webhook_receiver.wait_for("issue_comment")) == ["c3"]
