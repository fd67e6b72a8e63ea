"""/metrics counts what the bot did for one PR driven to merged, by kind and route, never by PR."""

from __future__ import annotations

import re
import sys
from collections import Counter

from prometheus_client.parser import text_string_to_metric_families

from bot.github.routes import OTHER
from tests.serving import CHECK_RUN_SETTLE_SECONDS

from .harness import REPO, bot_on_simulator, open_and_enroll, quiesce, steps
from .test_converge import FIXER_SCRIPT
from .test_merge_queue import _queued

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


async def scrape(h) -> Samples:
    r = await h.http.get("/metrics")
    assert r.status_code == 200
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(r.text) for s in family.samples
            if s.name.startswith("convergebot_")}


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of `name`'s samples whose labels include `labels`."""
    return sum(v for (n, ls), v in samples.items()
               if n == name and all(dict(ls).get(k) == want for k, want in labels.items()))


def moved(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return total(after, name, **labels) - total(before, name, **labels)


async def test_metrics_count_one_pr_from_enrollment_to_merged(tmp_path, db_url):
    script = tmp_path / "agent.py"
    script.write_text(FIXER_SCRIPT)
    fixer = {"kind": "command", "command": [sys.executable, str(script)]}
    async with bot_on_simulator(tmp_path, db_url, fixer_config=fixer) as h:
        # One finding, then a clean review: two review rounds, one fixer run, one merge.
        h.sim.set_reviewer(REPO, steps(1, 0, delay=CHECK_RUN_SETTLE_SECONDS))
        before = await scrape(h)
        key, number = await open_and_enroll(h)
        await h.wait_status(key, "merged", timeout=60)
        await quiesce(h)
        after = await scrape(h)

        rounds = await h.rounds(key)
        assert [(r.kind, r.verdict) for r in rounds] == [("review", "addressed"), ("review", None)]
        assert moved(before, after, "convergebot_rounds_started_total", kind="review") == 2
        assert moved(before, after, "convergebot_rounds_started_total") == 2
        assert moved(before, after, "convergebot_fixer_runs_total", verdict="addressed") == 1
        assert moved(before, after, "convergebot_fixer_runs_total") == 1
        assert moved(before, after, "convergebot_merges_total", how="merge") == 1
        assert moved(before, after, "convergebot_merges_total") == 1
        assert moved(before, after, "convergebot_escalations_total") == 0

        # GitHub requests by route template: the one merge, the PR read (fresh and unchanged).
        requests = "convergebot_github_requests_total"
        merge = "/repos/{owner}/{repo}/pulls/{number}/merge"
        assert moved(before, after, requests, method="PUT", route=merge, status="200") == 1
        assert moved(before, after, requests, method="PUT", route=merge) == 1
        pull = "/repos/{owner}/{repo}/pulls/{number}"
        assert moved(before, after, requests, method="GET", route=pull, status="200") >= 1
        assert moved(before, after, requests, status="304") >= 1
        assert moved(before, after, requests, method="POST", route="/graphql") >= 1
        # Every route the bot counted in this run is a template the simulator knows by the same
        # name (the registry is the process's: earlier tests in it counted other routes).
        bot_routes = {(dict(ls)["method"], dict(ls)["route"])
                      for (n, ls), v in after.items() if n == requests and v > before.get((n, ls), 0)}
        sim_routes = {tuple(r.split(" ", 1)) for r in h.sim.counters.snapshot()["routes"]}
        assert (("GET", OTHER) not in bot_routes) and bot_routes - sim_routes <= {("GET", "/rate_limit")}

        # A webhook (the /converge comment, the reviews) woke the PR and a job acted on it.
        assert moved(before, after, "convergebot_webhook_to_action_seconds_count") >= 1
        # PRs by status, from the database at the scrape.
        assert total(after, "convergebot_prs", status="merged") == 1
        assert total(after, "convergebot_prs", status="converging") == 0
        # The rate-limit budget, per resource, as GitHub last reported it.
        assert ("convergebot_github_rate_remaining", (("resource", "core"),)) in after

        # No label names a PR: no key, number or head.
        heads = {sha for r in rounds for sha in (r.entry_head, r.exit_head) if sha}
        values = Counter(v for (_, ls) in after for _, v in ls)
        for value in values:
            assert key not in value and f"#{number}" not in value and f"/{number}" not in value
            assert not re.search(r"\b[0-9a-f]{7,40}\b", value), value
            assert not any(sha[:7] in value for sha in heads), value


async def test_a_merge_by_the_merge_queue_counts_as_merge_queue(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url) as h:
        await h.sim.require_merge_queue(REPO, checks=["ci"])
        h.sim.set_reviewer(REPO, steps(0))
        before = await scrape(h)
        key, _ = await open_and_enroll(h)
        group = await _queued(h, key)
        await h.sim.set_check_run(REPO, group, "ci")
        await h.wait_status(key, "merged", timeout=60)
        await quiesce(h)
        after = await scrape(h)

        assert moved(before, after, "convergebot_merges_total", how="merge_queue") == 1
        assert moved(before, after, "convergebot_merges_total") == 1
        # The REST merge GitHub refused for the queue is counted with its status.
        merge = "/repos/{owner}/{repo}/pulls/{number}/merge"
        assert moved(before, after, "convergebot_github_requests_total", route=merge, status="405") == 1
        assert moved(before, after, "convergebot_github_requests_total", route=merge) == 1
