"""Per-key asyncio locks with bounded memory."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class KeyedLocks:
    """One asyncio.Lock per key, alive only while someone holds or waits for it.

    Different keys never wait on each other. The entry is dropped when its last user leaves, so
    memory stays bounded by the keys in use right now, not by every key ever seen.
    """

    def __init__(self) -> None:
        self._entries: dict[str, tuple[asyncio.Lock, list[int]]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = (asyncio.Lock(), [0])
        lock, users = entry
        users[0] += 1
        try:
            async with lock:
                yield
        finally:
            # In `finally`: a holder that raises, or a waiter cancelled before it got the lock,
            # would otherwise leave the entry behind for ever.
            users[0] -= 1
            if users[0] == 0:
                del self._entries[key]
