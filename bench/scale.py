"""N PRs × 3 rounds, all at once: wall time, CPU, peak RSS, database size and GitHub requests.

Each PR lives in a repository of its own (so merges do not bring other PRs' bases forward) and
goes through three rounds: a review with one finding, the fix, another review with one
finding, the fix, a clean review, then the merge. The fixer is the scripted one (real git:
clone, commit, lease push); the reviewer is the simulator's scripted Copilot. Everything runs in
this process: `serve`'s stack (HTTP server, webhooks both ways, workers, poller) and the
simulator, so the CPU figure is the bot's and the simulator's together.

The simulator counts every request; every answer but a 304 spends the rate limit. By default
its limit is lifted (`--limit 0`); `--limit 5000` gives each token GitHub's hourly 5,000 and
shows whether the bot paces itself (no request refused for the rate limit). `--window` shortens
the limit's window, so a run that needs several windows fits in minutes (the bot paces by the
reset time GitHub's headers give, whatever the window).

    .venv/bin/python bench/scale.py --prs 100 [--poll 60] [--limit 0] [--db sqlite|URL]

Progress (merged so far) goes to stderr, the figures to stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bot.fixers import ScriptedFixer
from bot.logs import configure_logging
from tests.e2e.harness import FILES, bot_on_simulator, steps

TARGET_PER_PR = 30  # rate-limited requests per PR, enrollment to merged
TARGET_WALL = 600.0  # seconds, 1,000 PRs with the limit lifted
TARGET_RSS_MB = 400


def say(*parts) -> None:
    print(*parts, file=sys.stderr, flush=True)


async def run(args) -> int:
    configure_logging("warning", "json")
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        db_url = f"sqlite:///{tmp_path / 'bench.db'}" if args.db == "sqlite" else args.db
        async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["push"]),
                                    poller={"interval_seconds": args.poll, "jitter_seconds": 0},
                                    convergence={"review_wait_timeout_seconds": 3600,
                                                 "nudge_window_seconds": 1800},
                                    # The defaults' job settings (config.example.toml), not the
                                    # tests' 50 ms idle polls: 8 workers looking 20 times a second
                                    # were about a tenth of the run's CPU (0.85 → 0.76 s a round).
                                    jobs={"idle_poll_seconds": 1.0, "backoff_base_seconds": 2.0,
                                          "backoff_cap_seconds": 600.0}) as h:
            h.sim.rate_limits.limit = args.limit or 10**9
            h.sim.rate_limits.window = args.window
            h.sim.rate_limits.reset()
            say(f"opening {args.prs} PRs, one repository each ...")
            keys = []
            for i in range(args.prs):
                repo = f"acme/s{i}"
                await h.sim.create_repo(repo, files=FILES, collaborators={"maint": "write"})
                h.sim.set_reviewer(repo, steps(1, 1, 0))
                pr = await h.sim.open_pr(repo, title=f"Change {i}", head="feat", author="dev",
                                         files={"app/core.py": f"def f():\n    return {i}\n"})
                keys.append((repo, pr.number))
            await h.sim.settle()
            h.sim.counters.reset()
            say("enrolling them all (/converge) ...")
            cpu0, t0 = time.process_time(), time.perf_counter()
            for repo, number in keys:
                await h.sim.comment(repo, number, "/converge", user="maint")
            pending = {f"{repo}#{number}" for repo, number in keys}
            last = time.perf_counter()
            while pending:
                if time.perf_counter() - t0 > args.timeout:
                    say(f"gave up after {args.timeout:.0f}s with {len(pending)} PRs not merged")
                    break
                views = {k: await h.view(k) for k in list(pending)[:200]}
                pending -= {k for k, v in views.items() if v is not None and v.pr.status == "merged"}
                if time.perf_counter() - last > 10:
                    last = time.perf_counter()
                    say(f"  {len(keys) - len(pending)}/{len(keys)} merged ({last - t0:.0f}s)")
                await asyncio.sleep(0.5)
            wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
            snap = h.sim.counters.snapshot()
            rounds = [len(await h.rounds(f"{repo}#{number}")) for repo, number in keys]
            db_file = tmp_path / "bench.db"
            db_size = os.path.getsize(db_file) + sum(
                os.path.getsize(p) for p in (tmp_path / "bench.db-wal",) if p.exists()) if args.db == "sqlite" else 0
    total = rate_limited = refused = 0
    by_route = []
    for route, statuses in snap["routes"].items():
        if " /_sim" in route:
            continue
        k = sum(statuses.values())
        total += k
        rate_limited += k - statuses.get("304", 0)
        refused += statuses.get("403", 0) + statuses.get("429", 0)
        by_route.append((k - statuses.get("304", 0), k, route))
    n = len(keys)
    merged = n - len(pending)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    limit = f"{args.limit} per {args.window} s" if args.limit else "lifted"
    print(f"{n} PRs × 3 rounds, poll {args.poll:g}s, rate limit {limit}, {args.db}")
    print(f"merged {merged}/{n}; rounds per PR {min(rounds)}-{max(rounds)}")
    print(f"wall {wall:.1f}s; CPU (bot and simulator) {cpu:.1f}s = {cpu / max(1, sum(rounds)):.3f}s per round")
    print(f"peak RSS {rss_mb:.0f} MB; database {db_size / 1e6:.1f} MB")
    print(f"requests {total} ({total / n:.1f} per PR), rate-limited {rate_limited} "
          f"({rate_limited / n:.1f} per PR), refused for the rate limit {refused}")
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
    p.add_argument("--poll", type=float, default=60.0, help="poll interval, seconds")
    p.add_argument("--limit", type=int, default=0, help="requests per token and window (0: lifted)")
    p.add_argument("--window", type=int, default=3600,
                   help="the rate limit's window, seconds (GitHub's is an hour; shorter compresses a run)")
    p.add_argument("--db", default="sqlite", help="sqlite, or a migrated PostgreSQL URL")
    p.add_argument("--timeout", type=float, default=3600.0, help="give up after this many seconds")
    return asyncio.run(run(p.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
