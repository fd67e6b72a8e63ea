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
