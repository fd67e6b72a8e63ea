import asyncio

import pytest

from storage.locks import KeyedLocks


async def test_same_key_is_serialized():
    locks = KeyedLocks()
    inside = 0
    peak = 0

    async def worker():
        nonlocal inside, peak
        async with locks.hold("acme/w#1"):
            inside += 1
            peak = max(peak, inside)
            await asyncio.sleep(0.01)
            inside -= 1

    await asyncio.gather(*(worker() for _ in range(10)))
    assert peak == 1
    assert len(locks) == 0


async def test_different_keys_do_not_wait_on_each_other():
    locks = KeyedLocks()
    a_inside = asyncio.Event()
    release_a = asyncio.Event()

    async def hold_a():
        async with locks.hold("acme/w#1"):
            a_inside.set()
            await release_a.wait()

    task = asyncio.create_task(hold_a())
    await a_inside.wait()
    # While #1 is held, #2 is acquired at once.
    async with asyncio.timeout(1):
        async with locks.hold("acme/w#2"):
            pass
    release_a.set()
    await task


async def test_a_holder_that_raises_does_not_wedge_its_key():
    locks = KeyedLocks()
    with pytest.raises(RuntimeError):
        async with locks.hold("acme/w#1"):
            raise RuntimeError("boom")
    assert len(locks) == 0
    async with asyncio.timeout(1):
        async with locks.hold("acme/w#1"):
            pass


async def test_a_cancelled_waiter_leaves_no_entry():
    locks = KeyedLocks()
    held = asyncio.Event()
    release = asyncio.Event()

    async def holder():
        async with locks.hold("k"):
            held.set()
            await release.wait()

    async def waiter():
        async with locks.hold("k"):
            pass

    h = asyncio.create_task(holder())
    await held.wait()
    w = asyncio.create_task(waiter())
    await asyncio.sleep(0.01)
    w.cancel()
    release.set()
    await h
    with pytest.raises(asyncio.CancelledError):
        await w
    assert len(locks) == 0


async def test_memory_stays_bounded_after_100k_distinct_keys():
    locks = KeyedLocks()
    peak = 0

    async def one(n: int):
        nonlocal peak
        async with locks.hold(f"org/repo#{n}"):
            peak = max(peak, len(locks))
            if n % 7 == 0:
                raise ValueError(n)

    for start in range(0, 100_000, 1_000):
        await asyncio.gather(*(one(n) for n in range(start, start + 1_000)), return_exceptions=True)
    assert len(locks) == 0
    assert peak <= 1_000
