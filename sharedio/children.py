"""Child processes watched by a pidfd: shared by the bot and the simulator, which import nothing
of each other but this.

Both run git (and the bot its agents) as child processes of an asyncio loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def children_watched_by_pidfd() -> Iterator[bool]:
    """While inside, asyncio learns that a child process ended from a pidfd the running loop
    reads, not from a thread of its own per child; yields whether it does.

    On Python 3.11 asyncio's default (`ThreadedChildWatcher`) starts a thread for every child
    and waits on the loop for that thread to start: a fix runs a dozen git processes, and each
    cost ~0.3 ms more CPU than with a pidfd (`bench/child_watcher.py`: 0.78 of the CPU and 0.86
    of the wall per child; BENCHMARKS.md at acb9095, "2 December, morning"). Python 3.12 and later use a
    pidfd themselves, and a kernel without pidfd_open (before 5.3) keeps the thread.

    The watcher is the process's, so it is put back on the way out: it holds the loop it was
    attached to, and a later loop (the next test's) must not find it."""
    if sys.version_info >= (3, 12) or not _pidfd_works():
        yield False
        return
    loop = asyncio.get_running_loop()
    previous = asyncio.get_child_watcher()
    watcher = asyncio.PidfdChildWatcher()
    watcher.attach_loop(loop)
    asyncio.set_child_watcher(watcher)
    try:
        yield True
    finally:
        asyncio.set_child_watcher(previous)  # closes `watcher`: its loop is about to end


def _pidfd_works() -> bool:
    try:
        os.close(os.pidfd_open(os.getpid()))
    except (AttributeError, OSError):
        return False
    return True
