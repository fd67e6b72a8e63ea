"""`side_by_side`: a duty's reads of many repositories, a few at a time, answers in order."""

from __future__ import annotations

import asyncio

import pytest

from bot.runtime.periodic import side_by_side


async def test_every_item_is_answered_in_order_with_at_most_the_bound_at_once():
    at_once, most, tasks_seen = 0, 0, set()

    async def read(n: int) -> int:
        nonlocal at_once, most
        at_once += 1
        most = max(most, at_once)
        tasks_seen.add(asyncio.current_task())
        await asyncio.sleep(0.001 * (n % 3))  # unequal reads: the free worker takes the next
        at_once -= 1
        return n * n

    assert await side_by_side(read, list(range(50)), 4) == [n * n for n in range(50)]
    assert most == 4, "as many at once as the bound"
    assert len(tasks_seen) == 4, "four tasks took the fifty items in turn, not a task each"


async def test_fewer_items_than_the_bound_and_none_at_all():
    async def read(n: int) -> int:
        return -n

    assert await side_by_side(read, [1, 2], 8) == [-1, -2]
    assert await side_by_side(read, [], 8) == []
    assert await side_by_side(read, [3], 0) == [-3], "a bound under one still reads"


async def test_a_read_that_fails_fails_the_whole():
    async def read(n: int) -> int:
        if n == 3:
            raise ValueError("three")
        return n

    with pytest.raises(ValueError, match="three"):
        await side_by_side(read, list(range(6)), 2)
