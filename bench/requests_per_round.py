"""GitHub requests one PR costs, by route: a clean PR (one round) and a 2-finding PR (two rounds).

The bot (`serve`'s whole stack, in this process) drives each PR from `/converge` to merged against
the simulator, webhooks flowing both ways, with a real command fixer (real git). The simulator
counts every request by method, route and status; a `304` does not spend the rate limit, every
other answer does ("rate-limited" below). The 2-finding round is the difference of the two PRs.

    .venv/bin/python bench/requests_per_round.py [--poll 60] [--db sqlite|URL]

The poll interval matters: each poll of an active PR is a conditional read (free when unchanged).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bot.logs import configure_logging
from storage import jobs
from tests.e2e.harness import REPO, bot_on_simulator, quiesce, steps
from tests.e2e.test_converge import FIXER_SCRIPT

# The e2e suite's command fixer (edits each finding's file, commits, says fixed), taking a moment
# as any real one does; the reviewer too. Without that, stages that last seconds in real use pass
# within the check run's settle window and their updates fold away, which flatters the count.
AGENT = "import time\ntime.sleep(1.5)\n" + FIXER_SCRIPT
REVIEW_DELAY = 1.5


TRACE = False


def spent(snapshot: dict) -> tuple[int, int, dict[str, tuple[int, int]]]:
    """(total, rate-limited, {route: (total, rate-limited)}) from the simulator's counters."""
    by_route = {}
    for route, statuses in snapshot["routes"].items():
        if " /_sim" in route:
            continue
        total = sum(statuses.values())
        by_route[route] = (total, total - statuses.get("304", 0))
    return (sum(t for t, _ in by_route.values()), sum(r for _, r in by_route.values()), by_route)


async def one_pr(h, head: str, findings: tuple[int, ...]) -> tuple[int, int, dict, float]:
    h.sim.set_reviewer(REPO, steps(*findings, delay=REVIEW_DELAY))
    pr = await h.sim.open_pr(REPO, title=f"Change {head}", head=head, author="dev",
                             files={f"app/{head}.py": "X = 1\n"})
    key = f"{REPO}#{pr.number}"
    await h.sim.settle()
    h.sim.counters.reset()
    start = time.monotonic()
    await h.sim.comment(REPO, pr.number, "/converge", user="maint")
    await h.wait_status(key, "merged", timeout=600)
    # The merged check-run update waits out its settle window: count it with this PR.
    async def written():
        return not [j for j in await jobs.list_jobs(h.rt.db, key)
                    if j.kind == "effect" and j.status in ("queued", "running")]

    await h.wait_for("the PR's last writes", written, timeout=60)
    await quiesce(h)
    if TRACE:
        print(f"\n-- {head}: every request in order (method, path, status)", file=sys.stderr)
        for method, path, status in h.sim.counters.recent:
            if not path.startswith("/_sim"):
                print(f"   {status}  {method} {path}", file=sys.stderr)
    return (*spent(h.sim.counters.snapshot()), time.monotonic() - start)


async def main(poll: float, db: str) -> None:
    configure_logging("warning", "json")
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        agent = tmp_path / "agent.py"
        agent.write_text(AGENT)
        db_url = f"sqlite:///{tmp_path / 'bench.db'}" if db == "sqlite" else db
        fixer = {"kind": "command", "command": [sys.executable, str(agent)]}
        async with bot_on_simulator(tmp_path, db_url, fixer_config=fixer,
                                    poller={"interval_seconds": poll}) as h:
            print("clean PR (one round) ...", file=sys.stderr)
            clean = await one_pr(h, "clean", (0,))
            print("2-finding PR (two rounds) ...", file=sys.stderr)
            two = await one_pr(h, "two", (2, 0))
    print(f"poll interval {poll:g} s, {db}")
    print(f"{'':34}{'total':>8}{'rate-limited':>14}{'seconds':>9}")
    print(f"{'clean PR, /converge to merged':34}{clean[0]:>8}{clean[1]:>14}{clean[3]:>9.1f}")
    print(f"{'2-finding PR, /converge to merged':34}{two[0]:>8}{two[1]:>14}{two[3]:>9.1f}")
    print(f"{'the 2-finding round (difference)':34}{two[0] - clean[0]:>8}{two[1] - clean[1]:>14}")
    print("\nby route, 2-finding PR (total / rate-limited):")
    for route, (total, limited) in sorted(two[2].items(), key=lambda kv: -kv[1][0]):
        print(f"  {total:>4} / {limited:<4} {route}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--poll", type=float, default=60.0, help="poller interval in seconds")
    parser.add_argument("--db", default="sqlite", help="sqlite (a temporary file) or a database URL")
    parser.add_argument("--trace", action="store_true", help="print every request in order (stderr)")
    args = parser.parse_args()
    TRACE = args.trace
    asyncio.run(main(args.poll, args.db))
