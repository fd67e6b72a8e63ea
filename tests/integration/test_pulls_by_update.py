"""The repository watch's one list read (`pulls_by_update`): most recently updated first, its pages
are read down to the first PR updated before the mark, and no further. Against the simulator."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bot.github.client import GitHubClient, open_github

from ..simulator_fixtures import sim, simulator  # noqa: F401

REPO = "acme/lib"
T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
FIRST_PAGE, NEXT_PAGES = "/repos/{owner}/{repo}/pulls", "/repositories/{repository_id}/pulls"


@pytest.fixture
async def client(simulator):  # noqa: F811
    await simulator.sim.create_repo(REPO)
    async with open_github(api_url=simulator.url, token="t", timeout=2, read_timeout=2) as gh:
        yield GitHubClient(gh, max_concurrency=4, call_timeout=4)


async def _prs_updated_at(sim, *minutes: int) -> list[int]:  # noqa: F811
    """One PR per stamp, the n-th updated `minutes[n]` after T0 (to the second, as GitHub stamps)."""
    numbers = []
    for i, m in enumerate(minutes):
        pr = await sim.open_pr(REPO, title=f"t{i}", head=f"side-{i}", author="dev", files={f"x{i}.txt": "x\n"})
        _, found = sim.pr(REPO, pr.number)
        found.updated_at = T0 + timedelta(minutes=m)
        numbers.append(pr.number)
    return numbers


def _pages_read(sim) -> int:  # noqa: F811
    return sim.counters.get("GET", FIRST_PAGE) + sim.counters.get("GET", NEXT_PAGES)


async def test_the_list_read_stops_at_the_page_that_reaches_the_mark(client, sim):  # noqa: F811
    # Six PRs, two a page: the mark lies within the second page, so the third is never asked for.
    numbers = await _prs_updated_at(sim, 1, 2, 3, 4, 5, 6)
    sim.counters.reset()
    pulls, _, complete = await client.pulls_by_update("acme", "lib", T0 + timedelta(minutes=4, seconds=30),
                                                      per_page=2)
    assert complete and [p["number"] for p in pulls] == numbers[::-1][:4]
    assert _pages_read(sim) == 2, sim.counters.recent


async def test_a_page_ending_in_the_mark_s_own_second_reads_on(client, sim):  # noqa: F811
    # Two PRs updated in the mark's very second, one at the end of the first page and one at the
    # top of the second: either may have changed after the look that set the mark, so the
    # second page is read too.
    numbers = await _prs_updated_at(sim, 1, 5, 5, 9)
    sim.counters.reset()
    pulls, _, complete = await client.pulls_by_update("acme", "lib", T0 + timedelta(minutes=5), per_page=2)
    assert complete and {p["number"] for p in pulls} >= set(numbers[1:])
    assert _pages_read(sim) == 2, sim.counters.recent
