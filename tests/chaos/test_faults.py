"""The harness's own fault fallbacks (tests/chaos/faults.py) do what the chaos suite relies on,
for a simulator without the seeded chaos API. Fast: no bot process."""

from __future__ import annotations

import httpx
import pytest

from simulator import Simulator, SimulatorServer

from .faults import ApiRates, Chaos, WebhookRates, duplicate_effects

pytestmark = pytest.mark.chaos
REPO = "acme/app"


async def test_fallback_request_faults_lost_acks_and_webhook_drops(tmp_path, webhook_receiver):
    sim = Simulator(root=tmp_path / "github")
    chaos = Chaos(sim, native=False)
    async with SimulatorServer(sim, app=chaos.app) as server, httpx.AsyncClient(base_url=server.url) as http:
        sim.configure_webhooks(webhook_receiver.url, webhook_receiver.secret)
        await sim.create_repo(REPO)
        pr = await sim.open_pr(REPO, title="t", head="f", files={"a.txt": "a\n"})

        chaos.api_on(7, ApiRates(error_rate=1.0, lost_ack_rate=0.0))
        assert (await http.get(f"repos/{REPO}/pulls/{pr.number}")).status_code in (500, 502, 503)

        chaos.api_on(7, ApiRates(error_rate=0.0, rate_limit_rate=0.0, secondary_rate=0.0,
                                 slow_rate=0.0, lost_ack_rate=1.0))
        r = await http.post(f"repos/{REPO}/issues/{pr.number}/comments", json={"body": "hi"})
        assert r.status_code == 502  # the answer is lost ...
        assert [e["body"] for e in sim.effects("issue_comment")] == ["hi"]  # ... the write is not
        assert chaos.injected()["lost_ack"] == 1

        chaos.off()
        chaos.webhooks_on(7, WebhookRates(drop_rate=1.0))
        await sim.comment(REPO, pr.number, "dropped", user="maint")
        chaos.off()
        await sim.comment(REPO, pr.number, "delivered", user="maint")
        await sim.settle()
        fates = {d.payload["comment"]["body"]: d.dropped
                 for d in sim.webhooks.find("issue_comment")}
        assert fates == {"hi": False, "dropped": True, "delivered": False}
        assert chaos.injected()["hook_dropped"] == 1


def test_duplicate_effects_names_a_write_made_twice():
    effects = [
        {"kind": "issue_comment", "actor": "bot", "repo": REPO, "number": 1, "body": "x"},
        {"kind": "issue_comment", "actor": "bot", "repo": REPO, "number": 2, "body": "x"},
        {"kind": "merge", "actor": "bot", "repo": REPO, "number": 1},
        {"kind": "issue_comment", "actor": "bot", "repo": REPO, "number": 1, "body": "x"},
    ]
    assert duplicate_effects(effects) == [
        {"kind": "issue_comment", "actor": "bot", "repo": REPO, "number": 1, "body": "x"}]
