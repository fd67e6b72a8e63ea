"""One poll cycle over N enrolled idle PRs: wall time, CPU, rate-limited requests.

An idle PR is one whose GitHub state did not change since the bot last read it: its three
conditional reads (the PR, its head ref, its reviews) are all answered 304, which spends no rate
limit. The question is what such a PR costs the bot per poll, and whether 10,000 of them fit one
poll cycle in under a minute.

Set-up (not measured):

  * The simulator runs in a child process (so its CPU is not the bot's) with its rate limit
    raised out of the way. N PRs are opened there through its Python API, 100 per repository,
    each from a branch of its own (`git update-ref --stdin` makes the branches in one go; every
    branch points at one commit of the repository's `feat` branch).
  * The PRs are enrolled by writing their rows straight into the database (a `waiting_review`
    row in round 1 with its round and an active run, as the bot's own first steps would leave
    it), not through `/api/prs`: enrolling 10,000 PRs one by one would take far longer than the
    poll being measured. The check run the bot would have published is recorded as said.
  * `serve`'s stack runs in this process (`bot.surfaces.serve.running`: HTTP server, workers, one GitHub
    client) except that the poller is not scheduled: the benchmark calls its `tick` itself.
  * The bot's HTTP cache is warmed by reading every PR once (3 GETs with 200 each).
  * Unless `--cold`, the repository watch marks the bot's earlier polls would have saved are
    written too, as after a restart: the process's first tick then reads each repository's PR
    list (a 200 each: the list is not in the fresh HTTP cache) instead of re-reading every PR.

With the default poll settings (a tick a minute, every resting PR fully re-read once in 15
minutes) each tick also re-reads its share of the PRs, the longest unread first: that share is
part of every cycle measured.

Measured, per cycle: from the tick until every sync it queued is done, the wall time, this
process's CPU seconds (all threads), the child simulator's CPU, and the simulator's counters of
requests answered other than 304 (each such request spends the rate limit; the cycle should
spend none).

  * `before`: the code paths as they were: write-locking read transactions
    (`Database.read_sessions = False`), every sync recording its observation
    (`rt.skip_unchanged = False`), and the old poller loop (one `jobs.enqueue`
    transaction per PR);
  * `after`: read sessions, the unchanged-PR short-circuit, the batched poller.

    .venv/bin/python bench/idle_poll.py --prs 1000 [--cold] [--before] [--cycles 3] [--workers 8] [--breakdown]
    .venv/bin/python bench/idle_poll.py --prs 10000

`--before` compares with the code paths as they were before; use it with `--cold` (the first
tick then re-reads every PR, as `before` does).

`--before` runs a `before` cycle ahead of the `after` ones and prints the ratios. `--breakdown`
first times the parts of an idle sync one PR at a time (a read transaction, a write one, the
three conditional GETs); `--profile FILE` writes a cProfile of the last cycle. Progress goes to
stderr (with the bot's info log lines); the figures to stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path

from storage.keys import PrKey, parse_pr_key
from storage.statuses import SameWork

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PER_REPO = 100
TARGET_SECONDS = 60.0


def say(*parts) -> None:
    print(*parts, file=sys.stderr, flush=True)


def proc_cpu(pid: int) -> float:
    """User + system CPU seconds of a process (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# --- the simulator child ---------------------------------------------------------------------


async def simulator_child(n: int, manifest: Path, root: Path) -> None:
    from simulator import Simulator, SimulatorServer

    sim = Simulator(root=root, rate_limit=10**9)
    async with SimulatorServer(sim) as server:
        rows = []
        started = time.monotonic()
        for r in range((n + PER_REPO - 1) // PER_REPO):
            name = f"acme/r{r}"
            repo = await sim.create_repo(name)
            sha = await sim.push(name, "feat", {"app/x.py": f"x = {r}\n"}, author="dev", start="main")
            count = min(PER_REPO, n - r * PER_REPO)
            script = "".join(f"create refs/heads/b{i} {sha}\n" for i in range(count)).encode()
            subprocess.run(["git", "update-ref", "--stdin"], input=script, check=True,
                           env={**os.environ, "GIT_DIR": str(repo.git_dir)})
            sim.git.invalidate(repo.git_dir)
            for i in range(count):
                pr = await sim.open_pr(name, title=f"Change {r}.{i}", head=f"b{i}", author="dev")
                data = await sim.pr_json(repo, pr)
                rows.append({"repo": name, "number": pr.number, "title": data["title"],
                             "url": data["html_url"], "branch": data["head"]["ref"],
                             "author": data["user"]["login"], "head": data["head"]["sha"]})
            if r % 10 == 9:
                say(f"  simulator: {len(rows)}/{n} PRs ({time.monotonic() - started:.0f}s)")
        manifest.write_text(json.dumps(rows))
        sim.counters.reset()
        print(f"URL {server.url}", flush=True)
        # Serve until the parent closes our stdin.
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


# --- the bot side ----------------------------------------------------------------------------


async def enroll_rows(db, rows: list[dict], *, marks: bool) -> None:
    """The rows the bot's own enrollment and first step would leave: waiting for a review; with
    `marks`, also the repository watch marks its earlier polls would have saved."""
    from storage.models import PullRequest, RepoWatchMark, Round, Run, utcnow

    now = utcnow()
    runs, prs_, rounds_ = [], [], []
    for row in rows:
        key = f"{row['repo']}#{row['number']}"
        pk = uuid.uuid4().hex
        runs.append(dict(process_key=pk, pr_key=key, kind="convergence", state="active",
                         started_at=now))
        prs_.append(dict(
            pr_key=key, repo=row["repo"], number=row["number"], url=row["url"], title=row["title"],
            status="waiting_review", current_round=1, process_key=pk, waiting_since=now,
            last_nudge_at=now, last_round_head=row["head"], husk_retries=0, max_rounds=8,
            converge_only=False, head_branch=row["branch"], author=row["author"],
            merge_approved=False, submitted_by="bench", head_sha=row["head"], latest_review_id=None,
            gh_state="open", synced_at=now, last_action="review requested", created_at=now,
            updated_at=now))
        rounds_.append(dict(pr_key=key, process_key=pk, round_no=1, entry_head=row["head"],
                            attempt=-1, started_at=now))
    watched = [dict(repo=r, mark=now, updated_at=now) for r in sorted({row["repo"] for row in rows})] if marks else []
    async with db.session() as s:
        for model, values in ((Run, runs), (PullRequest, prs_), (Round, rounds_), (RepoWatchMark, watched)):
            if not values:
                continue
            for start in range(0, len(values), 1000):
                await s.exec(model.__table__.insert(), params=values[start:start + 1000])


def patch_serve(said: dict) -> None:
    """The bench drives the poller's ticks itself; the check runs count as already said."""
    import bot.surfaces.serve as serve
    from bot.intake.poller import Poller
    from bot.runtime.context import Runtime

    class ManualPoller(Poller):
        def schedule(self, scheduler) -> None:
            pass

    class BenchRuntime(Runtime):
        def __post_init__(self) -> None:
            super().__post_init__()
            self.check_runs = dict(said)

    serve.Poller = ManualPoller
    serve.Runtime = BenchRuntime


async def old_tick(rt) -> None:
    """The poller's tick as it was: one `jobs.enqueue` transaction per PR."""
    from bot.engine import liveness
    from bot.engine.write_budget import paused
    from storage import deliveries, jobs, prs
    from storage.models import utcnow

    stamp = utcnow().strftime("%Y%m%dT%H%M%S.%f")
    views = await prs.list_all(rt.db)
    waiting = await jobs.pending_pr_keys(rt.db, "sync")
    active = []
    for view in views:
        if view.resubmittable:
            continue
        active.append(view.pr.pr_key)
        if view.pr.pr_key not in waiting:
            await jobs.enqueue(rt.db, "sync", f"poll:{view.pr.pr_key}:{stamp}", pr_key=view.pr.pr_key,
                               same_as=SameWork.PR)
    await liveness.check(rt, active)
    rt.health.runaway = await paused(rt)
    await jobs.prune(rt.db, utcnow() - timedelta(days=1), utcnow() - timedelta(days=7))
    await deliveries.prune(rt.db, utcnow() - timedelta(days=7))
    rt.wake_workers()


async def busy_syncs(db) -> int:
    from sqlalchemy import func
    from sqlmodel import select

    from storage.models import Job

    async with db.read_session() as s:
        return (await s.exec(select(func.count()).select_from(Job).where(
            Job.kind == "sync", Job.status.in_(("queued", "running"))))).one()


async def sim_get(http, path: str, method: str = "GET") -> dict:
    r = await http.request(method, path, headers={"Authorization": "token bench"})
    r.raise_for_status()
    return r.json()


async def cycle(rt, http, sim_pid: int, label: str, n: int, *, before: bool, poller=None) -> dict:
    from bot.intake.poller import Poller

    rt.db.read_sessions = not before
    rt.skip_unchanged = not before
    await sim_get(http, "_sim/counters", "DELETE")
    gets0, nm0 = rt.github.gets, rt.github.gets_not_modified
    say(f"{label}: tick over {n} PRs ...")
    cpu0, sim0, t0 = time.process_time(), proc_cpu(sim_pid), time.perf_counter()
    if before:
        await old_tick(rt)
    else:
        await (poller or Poller(rt)).tick()
    queued_in = time.perf_counter() - t0
    say(f"{label}: queued in {queued_in:.1f}s")
    last = time.perf_counter()
    while (left := await busy_syncs(rt.db)) > 0:
        if time.perf_counter() - last > 10:
            last = time.perf_counter()
            say(f"{label}: {n - left}/{n} syncs done ({last - t0:.0f}s)")
        await asyncio.sleep(0.1)
    wall = time.perf_counter() - t0
    cpu, sim_cpu = time.process_time() - cpu0, proc_cpu(sim_pid) - sim0
    counters = await sim_get(http, "_sim/counters")
    statuses: dict[str, int] = {}
    for route in counters["routes"].values():
        for status, k in route.items():
            statuses[status] = statuses.get(status, 0) + k
    requests = sum(statuses.values())
    spent = requests - statuses.get("304", 0)
    resting = poller.skipped if poller is not None else 0
    out = dict(label=label, prs=n, wall=wall, enqueue=queued_in, cpu=cpu, sim_cpu=sim_cpu,
               requests=requests, spent=spent, statuses=statuses, resting=resting,
               gets=rt.github.gets - gets0, not_modified=rt.github.gets_not_modified - nm0)
    print(f"{label:>7}: {n} PRs ({resting} resting), one poll cycle {wall:.1f}s wall (queueing {queued_in:.2f}s), "
          f"bot CPU {cpu:.1f}s ({cpu / n * 1000:.1f} ms/PR), simulator CPU {sim_cpu:.1f}s; "
          f"requests {requests} (by status {statuses}), rate-limited (not 304) {spent}", flush=True)
    return out


async def warm(rt, keys: list[PrKey], concurrency: int) -> None:
    """Read every PR once, so the bot's HTTP cache holds what each poll revalidates."""
    from bot.engine.refs import read_observation

    slots = asyncio.Semaphore(concurrency)
    done = 0
    started = time.monotonic()

    async def one(key: str) -> None:
        nonlocal done
        async with slots:
            await read_observation(rt, key)
        done += 1
        if done % 1000 == 0:
            say(f"  warm-up: {done}/{len(keys)} PRs read ({time.monotonic() - started:.0f}s)")

    await asyncio.gather(*(one(k) for k in keys))


async def breakdown(rt, keys: list[str]) -> None:
    """CPU per PR of the parts of an idle sync, one PR at a time (no concurrency)."""
    from bot.engine.refs import read_tracked
    from storage import prs, rounds

    async def per_pr(what: str, fn) -> None:
        cpu0, main0, t0 = time.process_time(), time.thread_time(), time.perf_counter()
        for key in keys:
            await fn(key)
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
        main = time.thread_time() - main0
        print(f"  {what:<44} {cpu / len(keys) * 1000:6.2f} ms CPU/PR, of it event loop thread "
              f"{main / len(keys) * 1000:.2f} ({wall / len(keys) * 1000:.2f} ms wall)")

    views = {}

    async def get(key):
        views[key] = (await prs.get(rt.db, key)).pr

    async def record(key):
        await prs.fenced_update(rt.db, key, views[key].process_key, {"synced_at": views[key].synced_at})

    print("breakdown of an idle sync (sequential):")
    for flag in (False, True):
        rt.db.read_sessions = flag
        await per_pr(f"prs.get (read_sessions={flag})", get)
    await per_pr("rounds.get (read session)", lambda k: rounds.get(rt.db, k, views[k].process_key, 1))
    await per_pr("read_tracked: 3 GETs answered 304", lambda k: read_tracked(rt, k))
    await per_pr("prs.fenced_update (a write transaction)", record)


async def bench(args) -> int:
    import httpx

    from bot.engine.check_summary import fields_of
    from storage import prs, rounds
    from storage.database import Database
    from storage.migrate import migrate
    from tests.serving import make_config

    work = Path(tempfile.mkdtemp(prefix="idle_poll_"))
    manifest = work / "prs.json"
    say(f"opening {args.prs} PRs in the simulator (child process) ...")
    child = subprocess.Popen(
        [sys.executable, __file__, "--simulator-child", str(args.prs), str(manifest), str(work / "github")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        url = ""
        for line in child.stdout:  # the simulator logs to stdout too
            if line.startswith("URL "):
                url = line.split()[1]
                break
        if not url:
            raise SystemExit("the simulator did not start")
        rows = json.loads(manifest.read_text())
        db_url = args.db_url or f"sqlite:///{work / 'convergebot.db'}"
        db = Database(db_url)
        await migrate(db)
        say(f"writing {len(rows)} enrolled rows ...")
        await enroll_rows(db, rows, marks=not args.cold)
        config = make_config(
            db_url, api_url=url,
            github={"max_concurrency": args.concurrency},
            jobs={"workers": args.workers, "idle_poll_seconds": 0.2},
            # The defaults: the share of full re-reads per tick is what a tick a minute needs.
            poller={"interval_seconds": 60, "full_sync_seconds": 900},
            convergence={"review_wait_timeout_seconds": 86400, "nudge_window_seconds": 86400},
        )
        # What the bot's check run says of each row, as the bot renders it (its repository has
        # no settings file: the global ones).
        said = {}
        for view in await prs.list_all(db):
            rnd = await rounds.get(db, view.pr.pr_key, prs.process_key_of(view.pr), view.pr.current_round)
            said[view.pr.pr_key] = (view.pr.head_sha, fields_of(view, rnd, None, config))
        await db.dispose()
        patch_serve(said)
        from bot.surfaces.serve import running

        keys = [parse_pr_key(f"{r['repo']}#{r['number']}") for r in rows]
        async with running(config) as (rt, _server), httpx.AsyncClient(base_url=url, timeout=60) as http:
            say("warming the bot's HTTP cache ...")
            await warm(rt, keys, args.concurrency)
            if args.breakdown:
                await breakdown(rt, keys[:200])
            results = []
            if args.before:
                results.append(await cycle(rt, http, child.pid, "before", len(keys), before=True))
            # One poller for every cycle: its first tick since the start re-reads every PR (it
            # cannot know what changed before it looked), the later ones watch each repository.
            from bot.intake.poller import Poller

            poller = Poller(rt)
            for i in range(args.cycles):
                profiler = None
                if args.profile and i == args.cycles - 1:
                    import cProfile

                    profiler = cProfile.Profile()
                    profiler.enable()
                results.append(await cycle(rt, http, child.pid, f"after{i + 1}" if args.cycles > 1 else "after",
                                           len(keys), before=False, poller=poller))
                if profiler is not None:
                    profiler.disable()
                    profiler.dump_stats(args.profile)
                    say(f"profile of the last cycle (event loop thread) in {args.profile}")
        afters = [r for r in results if r["label"].startswith("after")]
        first, steady = afters[0], afters[1:]
        print(f"first tick of the process ({'no marks: every PR re-read' if args.cold else 'marks kept'}): "
              f"{first['wall']:.1f}s, {first['spent']} rate-limited")
        if steady:
            # At the defaults each tick also re-reads its share of resting PRs (every PR once per
            # full_sync_seconds): part of every cycle measured here.
            best = max(steady, key=lambda r: r["wall"])
            print(f"steady tick (the slowest of {len(steady)}): {best['wall']:.2f}s wall, {best['resting']} "
                  f"of {best['prs']} PRs resting, {best['requests']} requests, {best['spent']} rate-limited")
            print(f"target: one cycle < {TARGET_SECONDS:.0f}s with 0 rate-limited requests -> "
                  f"{'met' if best['wall'] < TARGET_SECONDS and best['spent'] == 0 else 'NOT met'}")
        after = first
        if args.before:
            b = results[0]
            print(f"ratios before/after: wall {b['wall'] / after['wall']:.1f}x, "
                  f"bot CPU {b['cpu'] / after['cpu']:.1f}x "
                  f"({b['cpu'] / b['prs'] * 1000:.1f} -> {after['cpu'] / after['prs'] * 1000:.1f} ms/PR), "
                  f"queueing {b['enqueue'] / max(after['enqueue'], 1e-9):.0f}x "
                  f"({b['enqueue']:.2f}s -> {after['enqueue']:.2f}s)")
        print(f"settings: workers {args.workers}, GitHub concurrency {args.concurrency}, "
              f"database {'sqlite' if db_url.startswith('sqlite') else 'postgresql'}")
        return 0
    finally:
        with contextlib.suppress(Exception):
            child.stdin.close()
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--simulator-child":
        n, manifest, root = int(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])
        from bot.logs import configure_logging

        configure_logging("warning", stream=sys.stderr)
        asyncio.run(simulator_child(n, manifest, root))
        return 0
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prs", type=int, default=1000)
    p.add_argument("--before", action="store_true", help="run a cycle with the old code paths first")
    p.add_argument("--cycles", type=int, default=3, help="`after` cycles to run")
    p.add_argument("--cold", action="store_true",
                   help="no repository watch marks at the start: the first tick re-reads every PR")
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--concurrency", type=int, default=16, help="[github] max_concurrency")
    p.add_argument("--breakdown", action="store_true", help="time the parts of an idle sync first")
    p.add_argument("--profile", default=None, help="write a cProfile of the last cycle here")
    p.add_argument("--db-url", default=None, help="a migrated, empty database (default: a SQLite file)")
    args = p.parse_args()
    from bot.logs import configure_logging

    configure_logging("info", stream=sys.stderr)  # as `serve` logs (info), where progress goes
    return asyncio.run(bench(args))


if __name__ == "__main__":
    sys.exit(main())
