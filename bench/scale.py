"""N PRs × 3 rounds, all at once: wall time, CPU, peak RSS, database size and GitHub requests.

Each PR lives in a repository of its own (so merges do not bring other PRs' bases forward) and
goes through three rounds: a review with one finding, the fix, another review with one
finding, the fix, a clean review, then the merge. The fixer is the scripted one (real git:
clone, commit, lease push); the reviewer is the simulator's scripted Copilot.

`serve`'s stack (HTTP server, webhooks both ways, workers, poller) runs in this process; the
simulator runs in a child process, as GitHub is not in ours, so the bot's CPU and the
simulator's are measured apart (`--in-process` puts the simulator back in this process, as the
runs before the split did: their CPU figure is the two together).

The simulator sends webhooks 8 at a time (`--senders`), as GitHub sends a hook's deliveries side
by side; one at a time (the simulator's default, for tests) the queue held them 31 s (median) at
300 PRs, so polls found news before its webhook came and rounds waited on the simulator.

The simulator counts every request; every answer but a 304 spends the rate limit. By default
its limit is lifted (`--limit 0`); `--limit 5000` gives each token GitHub's hourly 5,000 and
shows whether the bot paces itself (no request refused for the rate limit). `--window` shortens
the limit's window, so a run that needs several windows fits in minutes (the bot paces by the
reset time GitHub's headers give, whatever the window).

    .venv/bin/python bench/scale.py --prs 100 [--poll 60] [--limit 0] [--db sqlite|URL] [--app | --hook] [--in-process]

`--app` runs the bot as a GitHub App: its installation token, its delivery log read for
redelivery every five minutes, and the scan reading the installation's repositories. `--hook`
keeps the token and names the organisation's webhook (`[webhooks] hooks`), whose delivery log
is read for redelivery the same way, with the token (its pages are rate-limited requests).

The per-PR figures count from the first `/converge` to the last merge, but for the bot's
start-up scan (its first read of every repository: three listings each, one repository per PR
here), printed apart: it is the installation's, paid once per start, whatever its PRs.

Progress (merged so far) goes to stderr, the figures to stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bot.config import GitHubConfig, JobsConfig
from bot.fixers import ScriptedFixer
from bot.logs import configure_logging
from sharedio.children import children_watched_by_pidfd
from tests.e2e.harness import FILES, bot_config, steps
from tests.serving import WEBHOOK_SECRET, serving

ROOT = Path(__file__).resolve().parents[1]
TARGET_PER_PR = 30  # rate-limited requests per PR, enrollment to merged
TARGET_WALL = 600.0  # seconds, 1,000 PRs with the limit lifted
TARGET_RSS_MB = 400


def say(*parts) -> None:
    print(*parts, file=sys.stderr, flush=True)


def children_cpu() -> float:
    """User + system CPU seconds of this process's ended children: the git processes (the
    simulator child ends only after the run, so it is not in it)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def delivery_lags(deliveries: list[dict]) -> list[float]:
    """Seconds from each sent webhook's queueing to its first attempt, sorted (the simulator
    stamps both to the second, as GitHub does)."""
    def at(stamp: str) -> float:
        return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").timestamp()

    return sorted(at(d["attempts"][0]["at"]) - at(d["queued_at"]) for d in deliveries if d["attempts"])


def proc_cpu(pid: int, *, children: bool = False) -> float:
    """User + system CPU seconds of a process (Linux); `children`: of its ended children instead
    (the simulator's own git processes)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    first = 13 if children else 11
    return (int(fields[first]) + int(fields[first + 1])) / os.sysconf("SC_CLK_TCK")


async def open_prs(sim, n: int, repos: int = 0) -> list[tuple[str, int]]:
    """N PRs, each in a repository of its own, or spread over `repos` repositories (each PR on
    a branch and a file of its own, so none conflicts with another's merge)."""
    keys = []
    for i in range(n):
        repo = f"acme/s{i % repos if repos else i}"
        if not repos or i < repos:
            await sim.create_repo(repo, files=FILES, collaborators={"maint": "write"})
            sim.set_reviewer(repo, steps(1, 1, 0))
        path = f"app/core{i}.py" if repos else "app/core.py"
        pr = await sim.open_pr(repo, title=f"Change {i}", head=f"feat-{i}" if repos else "feat", author="dev",
                               files={path: f"def f():\n    return {i}\n"})
        if repos:  # the findings (and so the fixer's edits) in the PR's own file
            sim.set_reviewer(repo, steps(1, 1, 0, path=path), pr.number)
        keys.append((repo, pr.number))
        if i % 100 == 99:
            say(f"  {i + 1}/{n} PRs opened")
    await sim.settle()
    return keys


def app_auth(tmp_path: Path) -> dict:
    """`[github]` for a GitHub App (its key made here; the simulator does not check it): the
    App's token, its delivery log read for redelivery, its installation's repositories scanned."""
    import uuid

    from tests.helpers import app_private_key

    ids = uuid.uuid4().int % 10**8
    return {"app_id": str(ids), "private_key_path": str(app_private_key(tmp_path)), "installation_id": ids + 1}


def new_simulator(root: Path, args):
    from simulator import Simulator

    sim = Simulator(root=root)
    sim.rate_limits.limit = args.limit or 10**9
    sim.rate_limits.window = args.window
    sim.rate_limits.reset()
    return sim


# --- the simulator child ---------------------------------------------------------------------


async def simulator_child(args) -> None:
    configure_logging("warning", "json")

    sim = new_simulator(Path(args.simulator_child), args)
    with children_watched_by_pidfd():  # as `convergebot simulator` runs it
        await _serve_child(sim, args)


async def _serve_child(sim, args) -> None:
    from simulator import SimulatorServer

    async with SimulatorServer(sim) as server:
        keys = await open_prs(sim, args.prs, getattr(args, "repos", 0))
        sim.counters.reset()
        print("KEYS " + json.dumps(keys), flush=True)
        print(f"URL {server.url}", flush=True)
        # Whatever else would go to stdout goes nowhere: the parent drains the pipe on the bot's
        # process, whose CPU is what the bench measures (3% of it at 1,000 PRs).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        # Serve until the parent closes our stdin.
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


class Remote:
    """The simulator in the child process, through its control API."""

    def __init__(self, url: str, pid: int) -> None:
        self.http = httpx.AsyncClient(base_url=url, timeout=60)
        self.pid = pid

    async def call(self, method: str, path: str, body: dict | None = None) -> dict:
        r = await self.http.request(method, path, json=body)
        r.raise_for_status()
        return r.json()

    async def comment(self, repo: str, number: int, body: str, user: str) -> None:
        await self.call("POST", f"_sim/repos/{repo}/pulls/{number}/comments", {"body": body, "user": user})

    async def counters(self) -> dict:
        return await self.call("GET", "_sim/counters")

    async def deliveries(self) -> list[dict]:
        return await self.call("GET", "_sim/deliveries")

    def cpu(self) -> float:
        return proc_cpu(self.pid)

    def git_cpu(self) -> float:
        return proc_cpu(self.pid, children=True)


class Local:
    """The simulator in this process (`--in-process`)."""

    def __init__(self, sim) -> None:
        self.sim = sim

    async def comment(self, repo: str, number: int, body: str, user: str) -> None:
        await self.sim.comment(repo, number, body, user=user)

    async def counters(self) -> dict:
        return self.sim.counters.snapshot()

    async def deliveries(self) -> list[dict]:
        return [d.to_dict() for d in self.sim.webhooks.find()]

    def cpu(self) -> float:
        return 0.0  # counted in this process's

    def git_cpu(self) -> float:
        return 0.0  # its git processes are this process's children


@asynccontextmanager
async def simulator(tmp_path: Path, args):
    """Yields (the simulator's URL, the PRs opened, a handle: `Remote` or `Local`)."""
    if args.in_process:
        from simulator import SimulatorServer

        sim = new_simulator(tmp_path / "github", args)
        async with SimulatorServer(sim) as server:
            keys = await open_prs(sim, args.prs, getattr(args, "repos", 0))
            sim.counters.reset()
            yield server.url, keys, Local(sim)
        return
    child = subprocess.Popen(
        [sys.executable, __file__, "--simulator-child", str(tmp_path / "github"), "--prs", str(args.prs),
         "--limit", str(args.limit), "--window", str(args.window), "--repos", str(getattr(args, "repos", 0))],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        keys, url = None, ""
        for line in child.stdout:
            if line.startswith("KEYS "):
                keys = [tuple(k) for k in json.loads(line[5:])]
            elif line.startswith("URL "):
                url = line.split()[1]
                break
        if not url or keys is None:
            raise SystemExit("the simulator did not start")
        # Nothing more comes (the child sends the rest of its stdout to /dev/null); drained all
        # the same, so a stray write can never fill the pipe and stop the simulator.
        threading.Thread(target=lambda: [None for _ in child.stdout], daemon=True).start()
        remote = Remote(url, child.pid)
        try:
            yield url, keys, remote
        finally:
            await remote.http.aclose()
    finally:
        child.stdin.close()
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()


# What only the scan reads: the installation's repositories, and each one's three listings.
SCAN_ROUTES = ("GET /installation/repositories", "GET /repos/{owner}/{repo}/pulls",
               "GET /repos/{owner}/{repo}/issues/comments", "GET /repos/{owner}/{repo}/pulls/comments")


async def scan_spent(rt, gh) -> dict[str, dict[str, int]]:
    """The requests of the bot's start-up scan, by route and status, taken as it ends."""
    while rt.scan_started_at is None and rt.config.scan.enabled:
        await asyncio.sleep(0.2)
    routes = (await gh.counters())["routes"]
    return {route: routes[route] for route in SCAN_ROUTES if route in routes}


async def run(args) -> int:
    from sqlalchemy import text

    from storage import rounds

    configure_logging("warning", "json")
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        db_url = f"sqlite:///{tmp_path / 'bench.db'}" if args.db == "sqlite" else args.db
        say(f"opening {args.prs} PRs, one repository each ...")
        async with simulator(tmp_path, args) as (url, keys, gh):
            config = bot_config(db_url, url,
                                poller={"interval_seconds": args.poll, "jitter_seconds": 0},
                                convergence={"review_wait_timeout_seconds": 3600,
                                             "nudge_window_seconds": 1800},
                                # The defaults' job settings (config.example.toml), not the
                                # tests' 50 ms idle polls: 8 workers looking 20 times a second
                                # were about a tenth of the run's CPU (0.85 → 0.76 s a round).
                                jobs={"idle_poll_seconds": 1.0, "backoff_base_seconds": 2.0,
                                      "backoff_cap_seconds": 600.0, "workers": args.workers,
                                      "fixer_workers": args.fixer_workers},
                                # The default's check-run settle window, not the tests' second.
                                github={"check_run_settle_seconds": GitHubConfig().check_run_settle_seconds,
                                        **(app_auth(tmp_path) if args.app else {})},
                                # The simulator's one webhook, as the organisation's (hook 1).
                                webhooks={"hooks": {"acme": 1}} if args.hook else {})
            async with serving(config, fixer=ScriptedFixer(["push"])) as (rt, http):
                hook = {"url": f"{http.base_url}/webhook", "secret": WEBHOOK_SECRET, "senders": args.senders}
                if isinstance(gh, Remote):
                    await gh.call("PUT", "_sim/webhooks", hook)
                else:
                    gh.sim.configure_webhooks(hook["url"], hook["secret"], senders=args.senders)
                # The start-up scan (every repository of the installation, or of the PRs the
                # bot knows) runs beside the enrollment, as it would; what it spent is taken
                # once it ends, on the routes only the scan reads (its three listings).
                start_up = asyncio.create_task(scan_spent(rt, gh))
                say("enrolling them all (/converge) ...")
                cpu0, sim_cpu0, t0 = time.process_time(), gh.cpu(), time.perf_counter()
                kids0, sim_git0 = children_cpu(), gh.git_cpu()
                for repo, number in keys:
                    await gh.comment(repo, number, "/converge", user="maint")
                # The bench watches with one count a second: it runs on the bot's event loop and
                # its CPU is counted as the bot's (reading each pending PR every half second was
                # a tenth of the bot's CPU at 50 PRs, and grew with N).
                merged_count = text("SELECT count(*) FROM pull_requests WHERE status = 'merged'")
                merged, last = 0, time.perf_counter()
                while merged < len(keys):
                    if time.perf_counter() - t0 > args.timeout:
                        say(f"gave up after {args.timeout:.0f}s with {len(keys) - merged} PRs not merged")
                        break
                    async with rt.db.read_session() as r:
                        merged = (await r.exec(merged_count)).one()[0]
                    if time.perf_counter() - last > 10:
                        last = time.perf_counter()
                        say(f"  {merged}/{len(keys)} merged ({last - t0:.0f}s)")
                    await asyncio.sleep(1.0)
                wall = time.perf_counter() - t0
                if not start_up.done():  # no scan ended (put off for the rate limit, say)
                    start_up.cancel()
                at_start = {} if start_up.cancelled() else await start_up
                # The writes still to come (a check run's last update waits while the merge's
                # sync runs, up to `check_run_hold_seconds`) are the PRs' too: counted once made.
                writes_left = text("SELECT count(*) FROM jobs WHERE kind = 'effect' AND status IN ('queued', 'running')")
                while True:
                    async with rt.db.read_session() as r:
                        left = (await r.exec(writes_left)).one()[0]
                    if not left or time.perf_counter() - t0 - wall > 300:
                        break
                    await asyncio.sleep(1.0)
                drained = time.perf_counter() - t0 - wall
                cpu = time.process_time() - cpu0
                sim_cpu = gh.cpu() - sim_cpu0
                git_cpu = children_cpu() - kids0
                sim_git_cpu = gh.git_cpu() - sim_git0
                snap = await gh.counters()
                lags = delivery_lags(await gh.deliveries())
                n_rounds = [len(await rounds.for_pr(rt.db, f"{repo}#{number}")) for repo, number in keys]
                async with rt.db.read_session() as r:
                    by_kind = (await r.exec(text("SELECT kind, count(*), sum(attempts) FROM jobs "
                                                 "GROUP BY kind ORDER BY 2 DESC"))).all()
                    payloads = (await r.exec(text("SELECT payload FROM jobs WHERE kind = 'effect'"))).all()
                by_effect = Counter(json.loads(payload).get("effect", "?") for (payload,) in payloads)
            db_file = tmp_path / "bench.db"
            db_size = os.path.getsize(db_file) + sum(
                os.path.getsize(p) for p in (tmp_path / "bench.db-wal",) if p.exists()) if args.db == "sqlite" else 0
    total = rate_limited = refused = 0
    by_route = []
    app_own = Counter()  # the App's own requests (its JWT): not the installation's rate limit
    start_up = sum(sum(statuses.values()) for statuses in at_start.values())
    start_up_limited = start_up - sum(statuses.get("304", 0) for statuses in at_start.values())
    for route, counts in snap["routes"].items():
        if " /_sim" in route:
            continue
        if route.split(" ", 1)[1].startswith("/app/"):
            app_own[route] += sum(counts.values())
            continue
        # Enrollment to merged: what the start-up scan had spent on the route is taken off.
        before = at_start.get(route, {})
        statuses = {status: k - before.get(status, 0) for status, k in counts.items()}
        k = sum(statuses.values())
        if not k:
            continue
        total += k
        rate_limited += k - statuses.get("304", 0)
        refused += statuses.get("403", 0) + statuses.get("429", 0)
        by_route.append((k - statuses.get("304", 0), k, route))
    n = len(keys)
    per_round = max(1, sum(n_rounds))
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    limit = f"{args.limit} per {args.window} s" if args.limit else "lifted"
    where = "in this process" if args.in_process else "in a child process"
    who = "GitHub App" if args.app else "token, the organisation's hook log read" if args.hook else "token"
    print(f"{n} PRs × 3 rounds, {who}, poll {args.poll:g}s, "
          f"rate limit {limit}, {args.db}, simulator {where}, "
          f"workers {args.workers} + {args.fixer_workers} for fixers, webhooks {args.senders} at a time")
    print(f"merged {merged}/{n}; rounds per PR {min(n_rounds)}-{max(n_rounds)}; the outbox drained "
          f"{drained:.0f}s after the last merge ({left} writes left)")
    if args.in_process:
        print(f"wall {wall:.1f}s; CPU (bot and simulator) {cpu:.1f}s = {cpu / per_round:.3f}s per round")
    else:
        print(f"wall {wall:.1f}s; bot CPU {cpu:.1f}s = {cpu / per_round:.3f}s per round; "
              f"simulator CPU {sim_cpu:.1f}s = {sim_cpu / per_round:.3f}s per round")
    print(f"git (the bot's child processes) CPU {git_cpu:.1f}s = {git_cpu / per_round:.3f}s per round")
    if not args.in_process:
        print(f"the simulator's own git (its ended child processes) CPU {sim_git_cpu:.1f}s = "
              f"{sim_git_cpu / per_round:.3f}s per round")
    cores = len(os.sched_getaffinity(0))
    floor = (cpu + sim_cpu + git_cpu + sim_git_cpu) / cores
    print(f"their CPU together over this machine's {cores} cores: at least {floor:.1f}s of wall "
          f"(the run took {wall / floor:.2f} times that)")
    print(f"bot peak RSS {rss_mb:.0f} MB; database {db_size / 1e6:.1f} MB")
    print("jobs per PR (runs): " + ", ".join(f"{kind} {k / n:.1f} ({(a or 0) / n:.1f})" for kind, k, a in by_kind))
    print("effects per PR: " + ", ".join(f"{effect} {k / n:.1f}" for effect, k in by_effect.most_common()))
    if lags:
        print(f"webhook deliveries {len(lags)} ({len(lags) / n:.1f} per PR); queued to sent (whole seconds): "
              f"median {lags[len(lags) // 2]:.0f}s, p90 {lags[len(lags) * 9 // 10]:.0f}s, max {lags[-1]:.0f}s")
    print(f"the start-up scan (its listings of every repository): {start_up} requests, "
          f"{start_up_limited} rate-limited ({start_up_limited / n:.1f} per PR); not in the figures below")
    print(f"enrollment to merged: requests {total} ({total / n:.1f} per PR), rate-limited {rate_limited} "
          f"({rate_limited / n:.1f} per PR), refused for the rate limit {refused}")
    if app_own:
        print(f"the App's own requests (its JWT, a rate limit of their own): {sum(app_own.values())} "
              f"({', '.join(f'{k} {r}' for r, k in app_own.most_common())})")
    print("per PR by route (rate-limited / total):")
    for spent_, k, route in sorted(by_route, reverse=True):
        print(f"  {spent_ / n:6.1f} / {k / n:5.1f}  {route}")
    print(f"target: <= {TARGET_PER_PR} rate-limited per PR -> "
          f"{'met' if rate_limited / n <= TARGET_PER_PR else 'NOT met'}; peak RSS < {TARGET_RSS_MB} MB -> "
          f"{'met' if rss_mb < TARGET_RSS_MB else 'NOT met'}"
          + (f"; 1,000 PRs within {TARGET_WALL:.0f}s -> {'met' if wall < TARGET_WALL else 'NOT met'}"
             if n >= 1000 and not args.limit else ""))
    return 0 if merged == n else 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prs", type=int, default=100)
    p.add_argument("--repos", type=int, default=0, help="spread the PRs over this many repositories (0: one each)")
    p.add_argument("--poll", type=float, default=60.0, help="poll interval, seconds")
    p.add_argument("--limit", type=int, default=0, help="requests per token and window (0: lifted)")
    p.add_argument("--window", type=int, default=3600,
                   help="the rate limit's window, seconds (GitHub's is an hour; shorter compresses a run)")
    p.add_argument("--db", default="sqlite", help="sqlite, or a migrated PostgreSQL URL")
    p.add_argument("--timeout", type=float, default=3600.0, help="give up after this many seconds")
    p.add_argument("--workers", type=int, default=JobsConfig().workers, help="`[jobs] workers` (the default's)")
    p.add_argument("--fixer-workers", type=int, default=JobsConfig().fixer_workers,
                   help="`[jobs] fixer_workers` (the default's)")
    p.add_argument("--senders", type=int, default=8,
                   help="webhook deliveries the simulator sends side by side, as GitHub does (1: one at a time, "
                        "the simulator's default for tests)")
    who = p.add_mutually_exclusive_group()
    who.add_argument("--app", action="store_true",
                     help="the bot as a GitHub App (redelivery on) instead of with a token")
    who.add_argument("--hook", action="store_true",
                     help="with the token, read the organisation's webhook's delivery log for redelivery")
    p.add_argument("--in-process", action="store_true",
                   help="run the simulator in this process (the CPU figure is then the two together)")
    p.add_argument("--simulator-child", help=argparse.SUPPRESS)  # the child: its git root
    args = p.parse_args()
    if args.simulator_child:
        asyncio.run(simulator_child(args))
        return 0
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
