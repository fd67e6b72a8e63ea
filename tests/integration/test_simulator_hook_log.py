"""The App's webhook delivery log and redelivery, over real HTTP, in GitHub's shapes."""

from __future__ import annotations

import socket

import httpx
import pytest

from tests.openapi import assert_matches
from tests.simulator_fixtures import WEBHOOK_SECRET

REPO = "acme/widgets"
JWT = {"Authorization": "Bearer header.claims.signature"}


@pytest.fixture
async def pr(sim, webhook_receiver):
    await sim.create_repo(REPO, collaborators={"bob": "write"})
    pr = await sim.open_pr(REPO, title="T", head="h", files={"a.txt": "a"}, author="alice")
    await sim.settle()  # the PR's own webhooks go nowhere: no hook is configured yet
    sim.configure_webhooks(webhook_receiver.url, WEBHOOK_SECRET)
    return pr


@pytest.fixture
async def app(simulator):
    async with httpx.AsyncClient(base_url=simulator.url, headers=JWT, timeout=10) as client:
        yield client


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_every_attempt_is_logged_newest_first_with_its_outcome(sim, pr, webhook_receiver, app):
    ok = await sim.comment(REPO, pr.number, "ok", user="bob")
    await sim.settle()
    webhook_receiver.status = 503
    await sim.comment(REPO, pr.number, "refused", user="bob")
    await sim.settle()
    webhook_receiver.status = 202
    sim.webhook_faults(drop_next=1)
    await sim.comment(REPO, pr.number, "dropped", user="bob")
    sim.configure_webhooks(f"http://127.0.0.1:{_closed_port()}/webhook", WEBHOOK_SECRET)
    await sim.comment(REPO, pr.number, "down", user="bob")
    await sim.settle()

    resp = await app.get("app/hook/deliveries")
    assert resp.status_code == 200
    log = resp.json()
    assert_matches("GET /app/hook/deliveries", log)
    assert [(e["status_code"], e["status"]) for e in log] == [
        (0, "failed to connect"), (0, "failed to connect"),
        (503, "Invalid HTTP Response: 503"), (202, "OK")]
    assert [e["id"] for e in log] == sorted((e["id"] for e in log), reverse=True)
    assert {(e["event"], e["action"], e["redelivery"]) for e in log} == {("issue_comment", "created", False)}
    assert {e["repository_id"] for e in log} == {sim.repo(REPO).id}
    # Each entry carries its own guid: the X-GitHub-Delivery the receiver saw.
    [received] = [r for r in webhook_receiver.received if r.payload["comment"]["id"] == ok.id]
    assert log[-1]["guid"] == received.delivery

    one = (await app.get(f"app/hook/deliveries/{log[-1]['id']}")).json()
    assert_matches("GET /app/hook/deliveries/{delivery_id}", one)
    assert one["request"]["headers"]["X-GitHub-Delivery"] == received.delivery
    assert one["request"]["payload"]["comment"]["body"] == "ok"


async def test_the_log_pages_with_a_cursor_in_the_link_header(sim, pr, app):
    for i in range(5):
        await sim.comment(REPO, pr.number, f"c{i}", user="bob")
    await sim.settle()
    seen, url, pages = [], "app/hook/deliveries?per_page=2", 0
    while url:
        resp = await app.get(url)
        pages += 1
        seen += resp.json()
        url = resp.links.get("next", {}).get("url")
        if url:
            assert "cursor=v1_" in url and url.startswith("http")
    assert pages == 3
    assert [e["id"] for e in seen] == [e.id for e in reversed(sim.webhooks.log.entries)]


async def test_a_redelivery_sends_the_same_guid_again_and_is_logged_as_one(sim, pr, webhook_receiver, app):
    webhook_receiver.status = 503
    await sim.comment(REPO, pr.number, "/converge", user="bob")
    await sim.settle()
    [failed] = (await app.get("app/hook/deliveries")).json()
    webhook_receiver.status = 202

    resp = await app.post(f"app/hook/deliveries/{failed['id']}/attempts")
    assert (resp.status_code, resp.json()) == (202, {})
    await sim.settle()

    first, again = webhook_receiver.events("issue_comment", "created")
    assert again.delivery == first.delivery == failed["guid"] and again.body == first.body
    newest = (await app.get("app/hook/deliveries")).json()
    assert [(e["guid"], e["redelivery"], e["status_code"]) for e in newest] == [
        (failed["guid"], True, 202), (failed["guid"], False, 503)]
    assert (await app.post("app/hook/deliveries/1/attempts")).status_code == 404


async def test_the_log_needs_the_apps_jwt_and_spends_no_installation_budget(sim, pr, simulator):
    await sim.comment(REPO, pr.number, "hi", user="bob")
    await sim.settle()
    async with httpx.AsyncClient(base_url=simulator.url, timeout=10,
                                 headers={"Authorization": "token t"}) as installation:
        before = (await installation.get("rate_limit")).json()["resources"]["core"]["remaining"]
        refused = await installation.get("app/hook/deliveries")
        assert refused.status_code == 401
        async with httpx.AsyncClient(base_url=simulator.url, headers=JWT, timeout=10) as app:
            for _ in range(3):
                assert (await app.get("app/hook/deliveries")).status_code == 200
        after = (await installation.get("rate_limit")).json()["resources"]["core"]["remaining"]
    assert after == before
