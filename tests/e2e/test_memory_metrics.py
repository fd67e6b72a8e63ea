"""What the process keeps in memory is bounded and shown: /metrics sizes each map and the HTTP
cache's bytes (bot/metrics.py `track_memory`), read from a bot that converged a PR."""

from __future__ import annotations

import re

from bot.runtime.context import Bounded

from .harness import REPO, bot_on_simulator, open_and_enroll, quiesce, steps


def _sample(text: str, name: str, labels: str = "") -> float:
    m = re.search(rf"^{re.escape(name)}{re.escape(labels)} (\S+)$", text, re.M)
    assert m, f"{name}{labels} not in /metrics"
    return float(m[1])


async def test_metrics_size_the_maps_and_the_http_cache_of_a_bot_at_work(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url, github={"http_cache_megabytes": 1}) as h:
        h.sim.set_reviewer(REPO, steps(0))
        key, _ = await open_and_enroll(h)
        await h.wait_status(key, "merged", timeout=60)
        await quiesce(h)
        text = (await h.http.get("/metrics")).text
        cached = _sample(text, "convergebot_http_cache_bytes")
        assert 0 < cached <= 1024 * 1024, cached
        assert _sample(text, "convergebot_memory_entries", '{map="http_cache"}') >= 1
        assert _sample(text, "convergebot_memory_entries", '{map="check_runs"}') == 1  # the one PR
        for name in ("protected_checks", "read_at", "step_locks", "own_pushes", "repo_configs"):
            assert _sample(text, "convergebot_memory_entries", f'{{map="{name}"}}') >= 0


def test_a_bounded_map_keeps_its_most_recently_written_keys():
    seen = Bounded(2)
    seen["a"], seen["b"] = 1, 2
    seen["a"] = 3  # written again: the most recent
    seen["c"] = 4
    assert dict(seen) == {"a": 3, "c": 4}
