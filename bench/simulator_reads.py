"""Requests per second the GitHub simulator serves for the bot's hot GETs, ref cache on and off.

One simulator (served over real HTTP, in this process) with `--prs` open PRs, each with a check
run and a status on its head. `--clients` concurrent clients send a mix of GET /pulls/{n},
GET /git/ref/heads/{branch}, GET /pulls (a page of 30), GET /commits/{sha}/check-runs and
GET /commits/{sha}/status for `--seconds`, first with the cache off (`sim.git.cache_heads =
False`: every ref read runs git), then on, then off and on again; each mode's numbers are the
sum of its two runs. `--push-every N` adds a control push to a PR branch every N requests (each
push invalidates the cache). Printed per mode: requests/s, git subprocesses per request, and the
CPU the git subprocesses used per 1000 requests; then the on/off ratio (the machine is noisy:
compare ratios between runs).

    .venv/bin/python bench/simulator_reads.py [--prs 100] [--clients 4] [--seconds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import resource
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bot.logs import configure_logging
from simulator import Simulator, SimulatorServer

REPO = "acme/widgets"


class Connection:
    """A bare keep-alive HTTP/1.1 client: httpx's own overhead per request is several times
    what the simulator's cached reads cost, and would hide the difference being measured."""

    def __init__(self, url: str) -> None:
        parsed = urlsplit(url)
        self.host, self.port = parsed.hostname, parsed.port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def get(self, path: str) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        self.writer.write(f"GET /{path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
                          "Accept: application/vnd.github+json\r\n\r\n".encode())
        status = int((await self.reader.readline()).split()[1])
        headers = {}
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        if headers.get("transfer-encoding") == "chunked":
            body = b""
            while size := int((await self.reader.readline()).strip(), 16):
                body += await self.reader.readexactly(size + 2)
            await self.reader.readline()
        else:
            body = await self.reader.readexactly(int(headers.get("content-length", 0)))
        return status, body

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            await self.writer.wait_closed()


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


async def setup(sim: Simulator, prs: int) -> list[tuple[int, str, str]]:
    await sim.create_repo(REPO, files={"README.md": "# widgets\n"})
    found = []
    for i in range(prs):
        pr = await sim.open_pr(REPO, title=f"Change {i}", head=f"change-{i}", author="dev",
                               files={f"app/m{i}.py": f"X = {i}\n"})
        sha = await sim.git.branch_sha(sim.repo(REPO).git_dir, pr.head_ref)
        await sim.set_check_run(REPO, sha, "ci")
        await sim.set_status(REPO, sha, "success", context="lint")
        found.append((pr.number, pr.head_ref, sha))
    await sim.settle()
    return found


async def run(sim: Simulator, url: str, prs: list[tuple[int, str, str]], clients: int,
              seconds: float, push_every: int,
              warm: bool = False) -> tuple[int, int, float, float]:
    """(requests, git subprocesses, git CPU seconds, wall seconds) of one timed run; `warm`:
    each path once instead."""
    paths = []
    for number, branch, sha in prs:
        paths += [f"repos/{REPO}/pulls/{number}", f"repos/{REPO}/git/ref/heads/{branch}",
                  f"repos/{REPO}/commits/{sha}/check-runs", f"repos/{REPO}/commits/{sha}/status"]
    paths += [f"repos/{REPO}/pulls?per_page=30"] * (len(paths) // 20)  # the poller's list reads
    mix = iter(paths) if warm else itertools.cycle(paths)
    done = 0
    deadline = time.monotonic() + seconds

    async def client() -> None:
        nonlocal done
        conn = Connection(url)
        try:
            while warm or time.monotonic() < deadline:
                path = next(mix, None)
                if path is None:
                    return
                status, body = await conn.get(path)
                assert status == 200, (path, status, body[:200])
                done += 1
                if push_every and done % push_every == 0:
                    _, branch, _ = prs[done // push_every % len(prs)]
                    await sim.push(REPO, branch, {"bench.txt": f"{done}\n"}, author="dev")
        finally:
            await conn.close()

    calls, cpu, start = sim.git.calls.total(), children_cpu(), time.monotonic()
    await asyncio.gather(*(client() for _ in range(clients)))
    return done, sim.git.calls.total() - calls, children_cpu() - cpu, time.monotonic() - start


async def main(n_prs: int, clients: int, seconds: float, push_every: int) -> None:
    configure_logging("warning", "json")
    with tempfile.TemporaryDirectory() as tmp:
        sim = Simulator(root=Path(tmp) / "github", rate_limit=10**9)
        async with SimulatorServer(sim) as server:
            print(f"setting up {n_prs} PRs ...", file=sys.stderr)
            prs = await setup(sim, n_prs)
            totals = {False: [0, 0, 0.0, 0.0], True: [0, 0, 0.0, 0.0]}
            for cached in (False, True, False, True):
                sim.git.cache_heads = cached
                # Untimed: one pass over every path, so both modes are measured warm.
                await run(sim, server.url, prs, clients, 0.0, 0, warm=True)
                print(f"cache {'on' if cached else 'off'}: {seconds:g} s ...", file=sys.stderr)
                for i, value in enumerate(await run(sim, server.url, prs, clients, seconds,
                                                    push_every)):
                    totals[cached][i] += value
    pushes = f"a push every {push_every} requests" if push_every else "no pushes"
    print(f"{n_prs} PRs, {clients} clients, {2 * seconds:g} s per mode, {pushes}")
    print(f"{'':10}{'requests':>10}{'req/s':>10}{'git/req':>10}{'git CPU ms/1000 req':>22}")
    rate = {}
    for cached in (False, True):
        done, calls, cpu, wall = totals[cached]
        rate[cached] = done / wall
        print(f"{'cache ' + ('on' if cached else 'off'):10}{done:>10}{rate[cached]:>10.0f}"
              f"{calls / done:>10.2f}{1e6 * cpu / done:>22.1f}")
    print(f"ratio (on / off): {rate[True] / rate[False]:.2f}x requests/s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prs", type=int, default=100)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=3.0, help="per run (two runs per mode)")
    parser.add_argument("--push-every", type=int, default=0,
                        help="a control push to a PR branch every N requests (0: never)")
    args = parser.parse_args()
    asyncio.run(main(args.prs, args.clients, args.seconds, args.push_every))
