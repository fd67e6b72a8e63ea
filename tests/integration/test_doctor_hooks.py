"""`convergebot doctor` with a token: each webhook named in `[webhooks] hooks` must have a
delivery log the token reads, or the redelivery of its lost deliveries cannot work."""

from __future__ import annotations

from bot.surfaces.doctor import run_doctor
from tests.serving import make_config

from ..simulator_fixtures import sim, simulator  # noqa: F401


async def _doctor(tmp_path, simulator, hooks: dict[str, int]) -> list[str]:  # noqa: F811
    lines: list[str] = []
    config = make_config(f"sqlite:///{tmp_path / 'd.db'}", api_url=simulator.url, webhooks={"hooks": hooks})
    await run_doctor(config, say=lines.append)
    return [line for line in lines if "delivery log" in line]


async def test_each_named_hooks_log_is_read_once(tmp_path, simulator, sim):  # noqa: F811
    await sim.create_repo("acme/lib", files={"README.md": "# lib\n"})
    sim.counters.reset()
    said = await _doctor(tmp_path, simulator, {"acme": 1, "acme/lib": 9})
    assert said[0] == "[ok  ] webhook delivery log orgs/acme/hooks/1: readable"
    assert said[1].startswith("[FAIL] webhook delivery log repos/acme/lib/hooks/9: ")
    assert "the token needs admin rights on the hook" in said[1] and len(said) == 2
    assert sim.counters.get(method="GET", route="/orgs/{org}/hooks/{hook_id}/deliveries") == 1


async def test_a_token_naming_no_hook_is_warned_of(tmp_path, simulator):  # noqa: F811
    said = await _doctor(tmp_path, simulator, {})
    assert said == ["[warn] webhook delivery logs: none named in [webhooks] hooks: a lost webhook is found "
                    "only by the poll and the scan, which read more often for it"]
