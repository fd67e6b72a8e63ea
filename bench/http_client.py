"""The bot's CPU per GitHub request, through httpx's own transport and through the aiohttp pool.

The simulator runs in a child process (its CPU is not measured). This process opens the bot's
GitHub client (`open_github` + `GitHubClient`, githubkit with its HTTP cache) and sends, from
`--concurrency` tasks at once, the mix of a round's requests: the PR and its reviews (conditional
reads, 304 after the first), the branch's ref, the review state by GraphQL and a check-run
update (PATCH). Each transport runs `--requests` requests per pass; the two take turns for
`--passes` passes, so a drift of the machine's speed falls on both. Printed: this process's CPU
per request for each pass, the median of each, and the ratio aiohttp / httpx.

    .venv/bin/python bench/http_client.py [--requests 3000] [--concurrency 8] [--passes 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import asynccontextmanager
from pathlib import Path
from unittest import mock

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

REPO = "acme/widgets"


# --- the simulator child ---------------------------------------------------------------------


async def serve(root: str) -> None:
    from bot.logs import configure_logging
    from simulator import Simulator, SimulatorServer

    configure_logging("warning", "json")
    sim = Simulator(root=Path(root))
    sim.rate_limits.limit = 10**9
    sim.rate_limits.reset()
    await sim.create_repo(REPO, files={"README.md": "hi\n"})
    pr = await sim.open_pr(REPO, title="t", head="feat", author="dev", files={"a.py": "x = 1\n"})
    await sim.settle()
    shown = await sim.pr_json(sim.state.repos[REPO], pr)
    async with SimulatorServer(sim) as server:
        print(json.dumps({"url": server.url, "number": pr.number, "head": shown["head"]["sha"]}), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


# --- the client ------------------------------------------------------------------------------


class _HttpxPool(httpx.AsyncHTTPTransport):
    """httpx's own transport in the pool's place (what `open_github` used before)."""

    def __init__(self, api_url: str) -> None:
        super().__init__()

    async def close(self) -> None:
        await self.aclose()


@asynccontextmanager
async def client(url: str, transport: str):
    from bot.github import client as module

    pool = _HttpxPool if transport == "httpx" else module.SharedPool
    with mock.patch.object(module, "SharedPool", pool):
        async with module.open_github(api_url=url, token="t") as gh:
            yield module.GitHubClient(gh, max_concurrency=64)


async def one_pass(url: str, transport: str, pr: dict, requests: int, concurrency: int) -> float:
    owner, repo = REPO.split("/")
    number, head = pr["number"], pr["head"]
    async with client(url, transport) as gh:
        run = await gh.create_check_run(owner, repo, name="bench", head_sha=head, status="in_progress")
        calls = [
            lambda: gh.pull(owner, repo, number),
            lambda: gh.reviews(owner, repo, number),
            lambda: gh.branch_head(owner, repo, "feat"),
            lambda: gh.review_state(owner, repo, number, head),
            lambda: gh.update_check_run(owner, repo, run["id"], output={"title": "t", "summary": "s"}),
        ]
        for call in calls:  # the first reads fill the cache; not counted
            await call()
        per_task = requests // concurrency

        async def task(k: int) -> None:
            for i in range(per_task):
                await calls[(k + i) % len(calls)]()

        cpu = time.process_time()
        await asyncio.gather(*(task(k) for k in range(concurrency)))
        return (time.process_time() - cpu) / (per_task * concurrency)


async def main(args) -> None:
    from bot.logs import configure_logging

    configure_logging("warning", "json")
    with tempfile.TemporaryDirectory() as tmp:
        child = subprocess.Popen([sys.executable, __file__, "--serve", tmp], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True, cwd=ROOT)
        try:
            pr = json.loads(child.stdout.readline())
            results: dict[str, list[float]] = {"httpx": [], "aiohttp": []}
            for n in range(args.passes):
                for transport in ("httpx", "aiohttp") if n % 2 == 0 else ("aiohttp", "httpx"):
                    per = await one_pass(pr["url"], transport, pr, args.requests, args.concurrency)
                    results[transport].append(per)
                    print(f"pass {n + 1} {transport:8} {per * 1e6:7.0f} µs of CPU per request", flush=True)
        finally:
            child.stdin.close()
            child.wait(timeout=30)
    medians = {k: statistics.median(v) for k, v in results.items()}
    print(f"median: httpx {medians['httpx'] * 1e6:.0f} µs, aiohttp {medians['aiohttp'] * 1e6:.0f} µs per request; "
          f"aiohttp / httpx {medians['aiohttp'] / medians['httpx']:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=3000, help="requests per pass, each transport")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(args.serve))
    else:
        asyncio.run(main(args))
