"""Starting child processes: on the event loop's thread (asyncio) against on a worker thread.

asyncio starts a child on the loop's own thread, and the loop waits there while the kernel forks
and execs it (subprocess's vfork returns once the child has exec'd). `run_process` starts it on
a worker thread instead, where that wait holds neither the loop nor the GIL, and learns that it
ended from a pidfd the loop reads (`bot/fixers/process.py`, `_Child`). A fix runs about a dozen
git processes.

Here `--tasks` tasks each run `git --version` through `run_process` one after the other,
`--children` in all, with each way of starting in turn (`--rounds` times, interleaved), while a
timer on the loop asks to run every 5 ms. Printed per way: the wall and this process's CPU
(every thread) per child, and how late the timer ran (mean and 99th percentile): the time the
loop could not run anything else. Then the ratios thread / loop.

    .venv/bin/python bench/child_spawn.py [--children 400] [--tasks 4] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TICK = 0.005


async def _children(n: int, tasks: int, cwd: str) -> tuple[float, float, list[float]]:
    from bot.fixers.process import run_process

    late: list[float] = []
    stop = asyncio.Event()

    async def timer() -> None:
        while not stop.is_set():
            asked = time.perf_counter()
            await asyncio.sleep(TICK)
            late.append(time.perf_counter() - asked - TICK)

    async def task(count: int) -> None:
        for _ in range(count):
            result = await run_process(["git", "--version"], cwd=cwd, env={"PATH": "/usr/bin:/bin"}, timeout=30)
            assert result.ok, result.describe()

    ticking = asyncio.create_task(timer())
    wall, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(task(n // tasks) for _ in range(tasks)))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    stop.set()
    await ticking
    done = n // tasks * tasks
    return wall * 1000 / done, cpu * 1000 / done, late


def _one(kind: str, n: int, tasks: int, cwd: str) -> tuple[float, float, list[float]]:
    from bot.fixers import process

    if kind == "thread":
        if not process._pidfd_works():
            raise SystemExit("no pidfd here (an old kernel): children start on the loop either way")
        return asyncio.run(_children(n, tasks, cwd))
    with mock.patch.object(process, "_pidfd_works", lambda: False):
        return asyncio.run(_children(n, tasks, cwd))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--children", type=int, default=400)
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    got: dict[str, list[tuple[float, float, list[float]]]] = {"loop": [], "thread": []}
    with tempfile.TemporaryDirectory() as cwd:
        for _ in range(args.rounds):  # interleaved: the machine's drift hits both alike
            for kind in got:
                got[kind].append(_one(kind, args.children, args.tasks, cwd))
    print(f"{args.children} children a run from {args.tasks} tasks, {args.rounds} runs each, interleaved; "
          f"a {TICK * 1000:g} ms timer on the loop meanwhile")
    for kind, runs in got.items():
        walls = ", ".join(f"{w:.2f}" for w, _, _ in runs)
        cpus = ", ".join(f"{c:.3f}" for _, c, _ in runs)
        late = [x for _, _, lates in runs for x in lates]
        print(f"  {kind:7} wall per child {walls} ms; CPU per child {cpus} ms; timer late "
              f"mean {statistics.mean(late) * 1000:.2f} ms, p99 {statistics.quantiles(late, n=100)[98] * 1000:.2f} ms")
    pairs = list(zip(got["thread"], got["loop"], strict=True))
    wall_ratio = statistics.median(t[0] / lo[0] for t, lo in pairs)
    cpu_ratio = statistics.median(t[1] / lo[1] for t, lo in pairs)
    late_ratio = statistics.median(statistics.mean(t[2]) / statistics.mean(lo[2]) for t, lo in pairs)
    print(f"thread / loop, median of the runs' ratios: wall {wall_ratio:.2f}, CPU {cpu_ratio:.2f}, "
          f"timer lateness {late_ratio:.2f}")


if __name__ == "__main__":
    main()
