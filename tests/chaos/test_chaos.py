"""The real `convergebot serve` under GitHub faults, webhook faults and SIGKILLs keeps its promises.

Size from the environment (docs/chaos.md): CONVERGEBOT_CHAOS_PRS (10), CONVERGEBOT_CHAOS_KILLS
(2), CONVERGEBOT_CHAOS_SEEDS ("1"); each seed runs on every backend of the `db_url` fixture.
`make chaos` runs the full size.
"""

from __future__ import annotations

import pytest

from .harness import Size, run_chaos

SIZE = Size.from_env()

pytestmark = [pytest.mark.chaos, pytest.mark.slow, pytest.mark.timeout(SIZE.pytest_timeout)]


@pytest.mark.parametrize("seed", SIZE.seeds)
async def test_every_pr_ends_as_scripted_and_nothing_is_done_twice(seed, db_url, tmp_path):
    result = await run_chaos(seed, SIZE, db_url, tmp_path)
    print(f"\n{result.summary}\nbot log: {tmp_path / 'bot.log'}")
    if result.failures:
        pytest.fail(result.report(), pytrace=False)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_a_backup_taken_mid_run_and_restored_resumes_with_nothing_done_twice(db_url, tmp_path):
    """`convergebot backup` of the serving database while PRs are in rounds, restored in its place
    once some PR has moved on: the bot picks up from the older state, and with the seed's kills
    besides, every PR still ends as scripted and nothing is done twice."""
    result = await run_chaos(SIZE.seeds[0], SIZE, db_url, tmp_path, restore=True)
    print(f"\n{result.summary}\nbot log: {tmp_path / 'bot.log'}")
    if result.failures:
        pytest.fail(result.report(), pytrace=False)
