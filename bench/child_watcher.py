"""Starting child processes from the event loop: asyncio's thread per child against a pidfd.

On Python 3.11 asyncio learns that a child ended from a thread it starts for each child
(`ThreadedChildWatcher`), and the loop waits for that thread to start; `serve` uses a pidfd the
loop reads instead (`sharedio/children.py`, `children_watched_by_pidfd`), as Python 3.12 and
later do by default. A fix runs about a dozen git processes. This runs `git --version` through
`run_process` N times one after the other, with each watcher in turn, in one process, and
prints the process's CPU (every thread: the watcher's threads too) and the wall per child for
each, and their ratios.

    .venv/bin/python bench/child_watcher.py [--children 300] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


async def _children(n: int, cwd: str) -> tuple[float, float]:
    from bot.fixers.process import run_process

    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(n):
        result = await run_process(["git", "--version"], cwd=cwd, env={"PATH": "/usr/bin:/bin"}, timeout=30)
        assert result.ok, result.describe()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return wall * 1000 / n, cpu * 1000 / n


async def _one(kind: str, n: int, cwd: str) -> tuple[float, float]:
    from sharedio.children import children_watched_by_pidfd

    if kind == "thread":
        return await _children(n, cwd)
    with children_watched_by_pidfd() as pidfd:
        if not pidfd:
            raise SystemExit("no pidfd watcher here (Python 3.12+ or an old kernel): nothing to compare")
        return await _children(n, cwd)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--children", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    got: dict[str, list[tuple[float, float]]] = {"thread": [], "pidfd": []}
    with tempfile.TemporaryDirectory() as cwd:
        for _ in range(args.rounds):  # interleaved: the machine's drift hits both alike
            for kind in got:
                got[kind].append(asyncio.run(_one(kind, args.children, cwd)))
    print(f"{args.children} children a run, {args.rounds} runs each, interleaved")
    for kind, runs in got.items():
        walls = ", ".join(f"{w:.2f}" for w, _ in runs)
        cpus = ", ".join(f"{c:.3f}" for _, c in runs)
        print(f"  {kind:7} wall per child {walls} ms; CPU per child {cpus} ms")
    pairs = list(zip(got["pidfd"], got["thread"], strict=True))
    wall_ratio = sorted(p[0] / t[0] for p, t in pairs)[args.rounds // 2]
    cpu_ratio = sorted(p[1] / t[1] for p, t in pairs)[args.rounds // 2]
    print(f"pidfd / thread, median of the runs' ratios: wall {wall_ratio:.2f}, CPU {cpu_ratio:.2f}")


if __name__ == "__main__":
    main()
