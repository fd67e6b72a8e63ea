"""A year of history: the bot's hot paths on a database of N finished PRs and M active ones.

Does a database a year old slow the bot down? The same measurements run twice in one run, on a
database holding only the M active PRs ("empty") and on one holding a year's history besides
them ("year"), and each figure is printed against its goal, the RSS and CPU also as year/empty.

Set-up (not measured):

  * The history is written straight into a migrated database through the bot's own models
    (SQLAlchemy Core, executemany in batches): per finished PR (merged 70%, converged 15%,
    abandoned 15%, enrolled evenly over the 365 days back) its row, its ended run, 2-4 rounds
    whose findings and summary hold 1-4 KB of review text, an agent attempt per fixed round, the
    `/converge` command; 8% an answered escalation (half of them adjudicated), 3% a dependency
    on the repository's previous PR. What the bot keeps for a while is there too: the last
    day's finished jobs (20 per PR) and the last week's webhook deliveries (12 per PR). The
    PRs are spread over 50 repositories. On PostgreSQL the tables are then ANALYZEd (autovacuum
    would have done it within a year); SQLite is left as the bot leaves it (no ANALYZE).
  * The retention a year of the leader's ticks would have applied is applied to it (old
    commands, jobs and deliveries deleted, the text of runs past `[retention] history_days` cut,
    storage/retention.py), so the ticks measured are the steady state's; `--backlog` leaves it
    out: the ticks then work through that backlog a batch each, as on the first start of a
    retention-aware bot on a year-old database.
  * The history is built once as a template and copied for the run (a file copy; PostgreSQL's
    CREATE DATABASE ... TEMPLATE); `--keep` keeps the template for the next run, which then
    skips the build.
  * The M active PRs exist in the simulator (a child process, `bench/idle_poll.py`'s: opened
    through its API, 100 per repository) and are written into each database as waiting for a
    review in round 1 with an active run, as idle_poll.py enrolls them (with the repository
    watch's marks). The other repositories of the history exist there too, empty.
  * PostgreSQL: the server CONVERGEBOT_TEST_POSTGRES_URL names, else a throwaway cluster
    started from the installed binaries, as the tests get theirs (tests/conftest.py; fsync off).

Measured, on each database:

  * In this process, `serve`'s stack (`bot.surfaces.serve.running`: HTTP server, job workers,
    the scan and redelivery duties) with the poller driven by hand, as in idle_poll.py (its
    check runs count as already said): after a warm-up read of every active PR, `--ticks`
    poller ticks (each until the syncs it queued are done: wall of the tick itself), the
    liveness watchdog's pass (`liveness.check` over the active PRs) 5 times, then `--requests`
    sequential requests to each of `/`, `/api/prs`, `/api/prs?scope=all`, `/livez`, `/metrics`
    and a finished PR's page, sent from a thread (p50 and max). All along, a task on the event
    loop sleeps 10 ms at a time and records how late it wakes: the loop's worst stall, by phase,
    with the loop thread's CPU within it (a stall longer than its CPU was the thread waiting for
    a core of the shared machine), and the longest garbage collection.
  * In a child process, `convergebot serve` on the same database (defaults but the addresses;
    the scan, redelivery and poller at their intervals): once started, its start-up syncs done
    and each page asked for 3 times, its RSS (VmRSS, sampled each second) and CPU (utime +
    stime) over `--idle-seconds`.

Goals (printed, for the year): no request over 200 ms; no loop stall over 100 ms; idle RSS
within 1.5x the empty database's; idle CPU under 2% of a core. The machine is shared and
noisy: every figure is an upper bound, and the year/empty ratios are the ones to compare.

    .venv/bin/python bench/year.py [--prs 120000] [--active 200] [--backend sqlite|postgres]
        [--idle-seconds 60] [--keep] [--backlog] [--db-dir DIR] [--ticks 3] [--requests 50] [--profile FILE]
        [--slow-callbacks]

`--slow-callbacks` runs the in-process loop in asyncio's debug mode, which logs every callback
over 50 ms with what it ran (slower: for finding a stall, not for the figures). Progress goes
to stderr, the figures to stdout. Exits 0 whatever the figures (it is a measurement).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import math
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import idle_poll  # noqa: E402  (bench/idle_poll.py: the simulator child, the enrollment, the patch)

REPOS = 50  # the history's repositories, acme/r0 .. acme/r49 (the active PRs are in the first)
FIRST_NUMBER = 1001  # history PR numbers start here (the simulator's active PRs are 1..100)
BATCH = 2000  # PRs a history transaction writes
YEAR = timedelta(days=365)
HISTORY_VERSION = 1  # a kept template built by another version of the history is rebuilt

REQUEST_GOAL_MS = 200.0
STALL_GOAL_MS = 100.0
RSS_GOAL_RATIO = 1.5
CPU_GOAL_PERCENT = 2.0

say = idle_poll.say
CHILDREN: list[subprocess.Popen] = []  # ended on exit, however the bench ends


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def mb(n: float) -> str:
    return f"{n / 1e6:.1f} MB"


# --- the history ---------------------------------------------------------------------------------

VOCABULARY = (
    "the function returns None when the cache is empty so every caller must check it before use "
    "this loop reads each row again on every pass which makes the request quadratic in the number "
    "of items consider reading them once and keeping a dict keyed by id the error is swallowed "
    "here and the job will look successful while nothing was written please log it or re raise "
    "the lock is taken after the read so two workers may both see the old value and both write "
    "the timeout is in milliseconds but the config documents seconds the test only covers the "
    "happy path add a case for an empty list and for a missing key this allocation happens per "
    "request and could move to start up the variable name shadows the builtin the comment no "
    "longer matches what the code does since the refactor the migration does not backfill "
    "existing rows so old records keep a null here the retry has no cap and no jitter"
).split()
PATHS = ("app/models.py", "app/views/list.py", "app/api/handlers.py", "lib/cache.py", "lib/retry.py",
         "tests/test_models.py", "src/server/routes.ts", "src/client/store.ts", "cmd/worker/main.go",
         "internal/queue/queue.go", "docs/setup.md", "migrations/0042_add_index.sql")
SEVERITIES = ("critical", "major", "major", "minor", "nit")
REVIEWERS = ("copilot-pull-request-reviewer[bot]", "cursor[bot]", "coderabbitai[bot]", "alice", "bob")
DELIVERY_EVENTS = (("pull_request", "synchronize"), ("pull_request_review", "submitted"),
                   ("check_suite", "completed"), ("issue_comment", "created"),
                   ("pull_request_review_thread", "resolved"), ("check_run", "completed"))


class History:
    """The rows of `n` finished PRs enrolled evenly over the year before `now`, a batch at a time
    (deterministic: the same seed gives the same history)."""

    def __init__(self, n: int, now: datetime, seed: int = 7) -> None:
        self.n, self.now, self.rng = n, now, random.Random(seed)
        rng = self.rng
        # A pool of paragraphs each text is cut from (generating every text word by word took
        # longer than writing it).
        self.paragraphs = [" ".join(rng.choices(VOCABULARY, k=rng.randint(25, 150))).capitalize() + "."
                           for _ in range(512)]

    def _hex(self, bits: int) -> str:
        return f"{self.rng.getrandbits(bits):0{bits // 4}x}"

    def _text(self, lo: int, hi: int) -> str:
        """About lo..hi characters of prose."""
        want, parts, size = self.rng.randint(lo, hi), [], 0
        while size < want:
            p = self.rng.choice(self.paragraphs)
            parts.append(p)
            size += len(p) + 2
        return "\n\n".join(parts)[:want]

    def _finding(self, number: int) -> dict[str, Any]:
        rng = self.rng
        path = rng.choice(PATHS)
        line = rng.randint(1, 800)
        body = (f"**{rng.choice(('Bug', 'Possible issue', 'Suggestion', 'Nit'))}:** {self._text(250, 900)}\n\n"
                f"```suggestion\n    {' '.join(rng.choices(VOCABULARY, k=8))}\n```")
        return {"thread_id": f"PRRT_kwDO{self._hex(64)}", "comment_id": rng.randint(10**9, 3 * 10**9),
                "path": path, "line": line, "body": body, "author": rng.choice(REVIEWERS),
                "fingerprint": self._hex(64), "answered": True, "severity": rng.choice(SEVERITIES),
                "optional": False, "twins": [], "twin_texts": []}

    def batch(self, start: int, stop: int) -> dict[str, list[dict[str, Any]]]:
        """Rows by table name for PRs start..stop-1."""
        rng, now = self.rng, self.now
        out: dict[str, list[dict[str, Any]]] = {t: [] for t in (
            "runs", "pull_requests", "rounds", "agent_attempts", "commands", "escalations",
            "adjudications", "dependencies", "jobs", "webhook_deliveries")}
        for i in range(start, stop):
            repo, number = f"acme/r{i % REPOS}", FIRST_NUMBER + i // REPOS
            key, pk = f"{repo}#{number}", self._hex(128)
            created = now - YEAR + YEAR * (i / self.n) + timedelta(seconds=rng.uniform(0, 60))
            status = rng.choices(("merged", "converged", "abandoned"), (70, 15, 15))[0]
            n_rounds = rng.choice((2, 2, 3, 3, 4))
            t, head = created, self._hex(160)
            review_id = rng.randint(10**9, 3 * 10**9)
            for r in range(1, n_rounds + 1):
                last = r == n_rounds
                started = t
                reviewed = started + timedelta(minutes=rng.uniform(3, 40))
                exit_head = head if last else self._hex(160)
                findings = [] if last else [self._finding(number) for _ in range(rng.randint(1, 3))]
                fixer_start = reviewed + timedelta(seconds=rng.uniform(5, 60))
                fixer_end = fixer_start + timedelta(minutes=rng.uniform(2, 25))
                ended = reviewed if last else fixer_end + timedelta(seconds=rng.uniform(5, 120))
                summary = (f"Clean review of {head[:7]}: no findings above the bar. " + self._text(150, 500) if last
                           else f"Addressed {len(findings)} finding(s). " + self._text(400, 1600))
                settled = [] if last else [
                    {"fingerprint": f["fingerprint"], "action": rng.choice(("fixed", "fixed", "declined")),
                     "round_no": r, "url": f"https://github.com/{repo}/pull/{number}/commits/{exit_head}",
                     "thread_id": f["thread_id"], "reason": self._text(40, 160)} for f in findings]
                out["rounds"].append(dict(
                    pr_key=key, process_key=pk, round_no=r, kind="review",
                    status="converged" if last else "addressed", entry_head=head, exit_head=exit_head,
                    review_id=review_id + r, findings=json.dumps(findings), summary=summary,
                    fixer=None if last else "command", attempt=-1 if last else 0,
                    fixer_started_at=None if last else fixer_start, fixer_finished_at=None if last else fixer_end,
                    verdict=None if last else "addressed", question=None, instructions=None,
                    settled=json.dumps(settled), started_at=started, ended_at=ended))
                if not last:
                    out["agent_attempts"].append(dict(
                        pr_key=key, process_key=pk, round_no=r, attempt=0, fixer="claude-code",
                        finished_at=fixer_end, seconds=(fixer_end - fixer_start).total_seconds(),
                        input_tokens=rng.randint(20_000, 400_000), output_tokens=rng.randint(1_000, 30_000),
                        turns=rng.randint(3, 60), cost_usd=round(rng.uniform(0.05, 3.0), 4), failure=None))
                t, head = ended, exit_head
            finished = min(t + timedelta(minutes=rng.uniform(1, 240)), now - timedelta(minutes=1))
            reason = {"merged": "merged", "converged": "converged: clean review",
                      "abandoned": "closed without merging"}[status]
            out["runs"].append(dict(process_key=pk, pr_key=key, kind="convergence",
                                    state="terminated" if status == "abandoned" else "completed",
                                    started_at=created, ended_at=finished, reason=reason))
            out["pull_requests"].append(dict(
                pr_key=key, repo=repo, number=number, url=f"https://github.com/{repo}/pull/{number}",
                title=" ".join(rng.choices(VOCABULARY, k=rng.randint(4, 12))).capitalize(), status=status,
                current_round=n_rounds, process_key=pk, waiting_since=None, last_review_id=review_id + n_rounds,
                last_nudge_at=None, last_round_head=head, husk_retries=0, last_progress_job_key=None,
                last_progress_result=None, max_rounds=8, converge_only=status == "converged",
                outcome=reason, head_branch=f"feature/{self._hex(32)}", head_repo=None, author="dev",
                converged_head=None if status == "abandoned" else head, merge_approved=False,
                mergeability_unknown_since=None, merge_budget_since=None, merge_group=None,
                submitted_by="dev", head_sha=head, latest_review_id=review_id + n_rounds,
                gh_state="open" if status == "converged" else "closed", synced_at=finished,
                check_run_id=rng.randint(10**9, 3 * 10**9), check_run_head=head, escalated_at=None,
                last_action=reason, created_at=created, updated_at=finished,
                converged_at=None if status == "abandoned" else finished,
                merged_at=finished if status == "merged" else None))
            out["commands"].append(dict(
                comment_id=5 * 10**9 + i, pr_key=key, author="dev", verb="converge", args=None, accepted=True,
                why="enrolled", created_at=created))
            if rng.random() < 0.08:
                fp, asked = self._hex(64), created + (t - created) / 2
                out["escalations"].append(dict(
                    pr_key=key, process_key=pk, round_no=1, kind="no_advance", question=self._text(300, 900),
                    fingerprint=fp, status="answered", answer=self._text(50, 300), answered_by="maintainer",
                    comment_id=rng.randint(10**9, 3 * 10**9), asked_at=asked,
                    answered_at=asked + timedelta(minutes=rng.uniform(5, 600))))
                if rng.random() < 0.5:
                    out["adjudications"].append(dict(
                        pr_key=key, fingerprint=fp, answer="decline: " + self._text(30, 200),
                        adjudicated_by="maintainer", adjudicated_at=asked + timedelta(minutes=5),
                        invalidated_at=None))
            if i >= REPOS and rng.random() < 0.03:
                out["dependencies"].append(dict(pr_key=key, depends_on_key=f"{repo}#{number - 1}",
                                                source="explicit"))
            if now - finished < timedelta(days=1):
                for j in range(20):
                    at = finished - timedelta(seconds=rng.uniform(0, 3600))
                    out["jobs"].append(dict(
                        kind=rng.choice(("sync", "sync", "effect", "fix", "progress_check")), pr_key=key,
                        process_key=pk, round_no=1, key=f"history:{i}:{j}", payload="{}", run_at=at,
                        attempts=1, max_attempts=8, status="done", lease_owner=None, lease_until=None,
                        started_at=at, finished_at=at, last_error=None, created_at=at))
            if now - finished < timedelta(days=7):
                for _ in range(12):
                    event, action = rng.choice(DELIVERY_EVENTS)
                    at = finished - timedelta(seconds=rng.uniform(0, 86400))
                    out["webhook_deliveries"].append(dict(
                        delivery_id=self._hex(128), event=event, action=action, received_at=at,
                        processed_at=at, outcome="processed", error=None))
        return out


async def build_history(url: str, n: int, backlog: bool) -> None:
    from sqlalchemy import text

    from storage.database import Database
    from storage.migrate import migrate
    from storage.models import SQLModel, utcnow

    db = Database(url)
    try:
        await migrate(db)
        tables = SQLModel.metadata.tables
        history = History(n, utcnow())
        started, written = time.monotonic(), 0
        for start in range(0, n, BATCH):
            rows = history.batch(start, min(n, start + BATCH))
            written += sum(len(r.get("findings") or "") + len(r.get("summary") or "") for r in rows["rounds"])
            async with db.engine.begin() as conn:
                for name, values in rows.items():
                    if values:
                        await conn.execute(tables[name].insert(), values)
            done = min(n, start + BATCH)
            if done % (5 * BATCH) == 0 or done == n:
                took = time.monotonic() - started
                say(f"  history: {done}/{n} PRs ({took:.0f}s, {done / took:.0f} PRs/s, "
                    f"{mb(written)} of findings and summaries)")
        if not backlog:
            # What a year of the leader's ticks would have done: old commands, jobs and deliveries
            # gone, the text of runs past [retention] history_days cut (a batch a tick there).
            from bot.config import RetentionConfig, retention_settings
            from storage import retention

            t0 = time.monotonic()
            swept = await retention.sweep(db, retention_settings(RetentionConfig()), utcnow(), passes=10**9)
            say(f"  retention applied in {time.monotonic() - t0:.0f}s: {swept.as_dict()}")
        if db.is_postgres:
            async with db.engine.begin() as conn:
                await conn.execute(text("ANALYZE"))
    finally:
        await db.dispose()


async def finished_prs(url: str) -> int:
    """How many finished PRs a database holds (a kept template: the history it was built with)."""
    from sqlalchemy import func
    from sqlmodel import col, select

    from storage.database import Database
    from storage.models import PullRequest
    from storage.prs import UNFINISHED

    db = Database(url)
    try:
        async with db.read_session() as s:
            return (await s.exec(select(func.count()).select_from(PullRequest)
                                 .where(col(PullRequest.status).not_in(UNFINISHED)))).one()
    except Exception:
        return -1
    finally:
        await db.dispose()


# --- the databases -------------------------------------------------------------------------------


class Backend:
    """Where the databases live: a template of the history, and a copy of it (or a new empty
    database) per measurement."""

    def __init__(self, kind: str, directory: Path, n: int, keep: bool, backlog: bool) -> None:
        self.kind, self.dir, self.n, self.keep, self.backlog = kind, directory, n, keep, backlog
        self.cluster = None
        self.admin = ""
        self.made: list[str] = []  # databases (names or files) to drop at the end

    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        if self.kind == "postgres":
            self.admin = os.environ.get("CONVERGEBOT_TEST_POSTGRES_URL", "")
            if not self.admin:
                from tests.pgcluster import Cluster

                self.cluster = Cluster()
                self.admin = self.cluster.start()
                say(f"PostgreSQL: a throwaway cluster on {self.admin} (fsync off)")
                if self.keep:
                    say("  --keep keeps a PostgreSQL template only on CONVERGEBOT_TEST_POSTGRES_URL's server")

    @property
    def template_name(self) -> str:
        return f"year_history_v{HISTORY_VERSION}_{self.n}" + ("_backlog" if self.backlog else "")

    def url_of(self, name: str) -> str:
        if self.kind == "sqlite":
            return f"sqlite:///{self.dir / (name + '.db')}"
        from sqlalchemy.engine import make_url

        return make_url(self.admin).set(drivername="postgresql", database=name).render_as_string(hide_password=False)

    async def _admin(self, *statements: str) -> None:
        import asyncpg
        from sqlalchemy.engine import make_url

        conn = await asyncpg.connect(make_url(self.admin).set(drivername="postgresql")
                                     .render_as_string(hide_password=False))
        try:
            for sql in statements:
                await conn.execute(sql)
        finally:
            await conn.close()

    async def template(self) -> str:
        """The history's template, built unless kept from an earlier run."""
        name = self.template_name
        url = self.url_of(name)
        if self.keep and await finished_prs(url) == self.n:
            say(f"reusing the kept history {self.where(name)}")
            return url
        if self.kind == "sqlite":
            path = self.dir / f"{name}.db"
            for p in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
                p.unlink(missing_ok=True)
        else:
            await self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)', f'CREATE DATABASE "{name}"')
        if not self.keep:
            self.made.append(name)
        say(f"building a year of history: {self.n} finished PRs ...")
        started = time.monotonic()
        await build_history(url, self.n, self.backlog)
        say(f"history built in {time.monotonic() - started:.0f}s: {self.where(name)}")
        return url

    def where(self, name: str) -> str:
        return str(self.dir / f"{name}.db") if self.kind == "sqlite" else f"database {name}"

    async def copy(self, template: str | None, name: str) -> str:
        """A new database `name`: a copy of the template, or (None) freshly migrated."""
        from storage.database import Database
        from storage.migrate import migrate

        self.made.append(name)
        url = self.url_of(name)
        if self.kind == "sqlite":
            path = self.dir / f"{name}.db"
            for p in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
                p.unlink(missing_ok=True)
            if template is not None:
                for suffix in ("", "-wal"):  # a WAL left behind holds the last commits
                    source = self.dir / f"{self.template_name}.db{suffix}"
                    if source.exists():
                        shutil.copyfile(source, path.with_name(path.name + suffix))
        else:
            made_from = f' TEMPLATE "{self.template_name}"' if template is not None else ""
            await self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)', f'CREATE DATABASE "{name}"{made_from}')
        db = Database(url)
        try:
            await migrate(db)
        finally:
            await db.dispose()
        return url

    async def size(self, url: str) -> int:
        from sqlalchemy import text

        from storage.database import Database

        db = Database(url)
        try:
            if db.sqlite_file is not None:
                return sum(p.stat().st_size for p in db.sqlite_file.parent.glob(db.sqlite_file.name + "*")
                           if not p.name.endswith("-lock"))
            async with db.read_session() as s:
                return (await s.exec(text("SELECT pg_database_size(current_database())"))).one()[0]
        finally:
            await db.dispose()

    async def drop(self, *names: str) -> None:
        """Drop the databases `names` (none given: every one this run made but a kept template)."""
        for name in names or list(self.made):
            if name not in self.made:
                continue
            self.made.remove(name)
            if self.kind == "sqlite":
                for p in self.dir.glob(f"{name}.db*"):
                    p.unlink(missing_ok=True)
            else:
                with contextlib.suppress(Exception):
                    await self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def stop(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()
            self.cluster = None


# --- in-process measurements ---------------------------------------------------------------------


class StallWatch:
    """How late a task that sleeps 10 ms at a time wakes up: the event loop's worst stall, by the
    phase under way."""

    TICK = 0.010

    def __init__(self) -> None:
        self.phase = "start-up"
        self.worst: dict[str, float] = {}  # the latest wake-up (wall), by phase
        self.busy: dict[str, float] = {}  # the loop thread's CPU within the latest wake-up, by phase
        self.gc_worst = 0.0  # the longest garbage collection (any thread)
        self._gc_started = 0.0
        self.task: asyncio.Task | None = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            t, cpu = loop.time(), time.thread_time()
            await asyncio.sleep(self.TICK)
            late = loop.time() - t - self.TICK
            if late > self.worst.get(self.phase, -1.0):
                # A wake-up late by more than the loop's own work in it was the thread waiting
                # for a core (the machine is shared), not the loop busy.
                self.worst[self.phase] = late
                self.busy[self.phase] = time.thread_time() - cpu

    def _gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
        else:
            self.gc_worst = max(self.gc_worst, time.perf_counter() - self._gc_started)

    def start(self) -> None:
        gc.callbacks.append(self._gc)
        self.task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        with contextlib.suppress(ValueError):
            gc.callbacks.remove(self._gc)
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task


def timed_requests(base: str, paths: list[str], n: int) -> dict[str, list[float]]:
    """`n` sequential GETs of each path (one path after the other), from this thread: ms each."""
    import httpx

    out: dict[str, list[float]] = {}
    with httpx.Client(base_url=base, timeout=60) as http:
        for path in paths:
            http.get(path).raise_for_status()  # the first of each is not counted: a warm-up
            times = out.setdefault(path, [])
            for _ in range(n):
                t0 = time.perf_counter()
                r = http.get(path)
                r.raise_for_status()
                times.append((time.perf_counter() - t0) * 1000)
    return out


def page_paths(detail_key: str | None) -> list[str]:
    paths = ["/", "/api/prs", "/api/prs?scope=all", "/livez", "/metrics"]
    if detail_key:
        repo, number = detail_key.split("#")
        paths.append(f"/prs/{repo}/{number}")
    return paths


async def in_process(url: str, sim_url: str, rows: list[dict], args, label: str, detail_key: str | None) -> dict:
    from bot.engine import liveness
    from bot.engine.check_summary import fields_of
    from bot.intake.poller import Poller
    from storage import prs, rounds
    from storage.database import Database
    from storage.keys import parse_pr_key
    from tests.serving import make_config

    config = make_config(
        url, api_url=sim_url,
        github={"max_concurrency": 16},
        # The defaults, but for the tick a minute that make_config stretches for its tests.
        jobs={"workers": 8, "idle_poll_seconds": 1.0},
        poller={"interval_seconds": 60, "full_sync_seconds": 900, "fresh_read_seconds": 30},
        convergence={"review_wait_timeout_seconds": 86400, "nudge_window_seconds": 86400},
    )
    db = Database(url)
    said = {}
    try:
        for view in await prs.list_unfinished(db):
            rnd = await rounds.get(db, view.pr.pr_key, prs.process_key_of(view.pr), view.pr.current_round)
            said[view.pr.pr_key] = (view.pr.head_sha, fields_of(view, rnd, None, config))
    finally:
        await db.dispose()
    idle_poll.patch_serve(said)
    from bot.surfaces.serve import running

    if args.slow_callbacks:
        loop = asyncio.get_running_loop()
        loop.set_debug(True)
        loop.slow_callback_duration = 0.05
    keys = [parse_pr_key(f"{r['repo']}#{r['number']}") for r in rows]
    watch = StallWatch()
    out: dict[str, Any] = {}
    profiler = None
    if args.profile and label == "year":
        import cProfile

        profiler = cProfile.Profile()
    async with running(config, freeze=True) as (rt, server):  # as `serve` does
        watch.start()
        try:
            watch.phase = "warm-up"
            await idle_poll.warm(rt, keys, 16)
            poller = Poller(rt)
            if profiler is not None:
                profiler.enable()
            ticks = []
            for i in range(args.ticks):
                watch.phase = "tick"
                t0 = time.perf_counter()
                await poller.tick()
                ticks.append(time.perf_counter() - t0)
                watch.phase = "syncs"
                while await idle_poll.busy_syncs(rt.db) > 0:
                    await asyncio.sleep(0.1)
                say(f"  tick {i + 1}: {ticks[-1] * 1000:.0f} ms ({poller.queued} syncs queued, "
                    f"{poller.skipped} resting)")
            out["ticks"] = ticks
            watch.phase = "watchdog"
            active = [v.pr.pr_key for v in await prs.list_unfinished(rt.db) if not v.resubmittable]
            passes = []
            for _ in range(5):
                t0 = time.perf_counter()
                await liveness.check(rt, active)
                passes.append(time.perf_counter() - t0)
            out["watchdog"] = passes
            watch.phase = "requests"
            say(f"  {args.requests} requests to each page ...")
            out["requests"] = await asyncio.to_thread(
                timed_requests, f"http://127.0.0.1:{server.port}", page_paths(detail_key), args.requests)
        finally:
            if profiler is not None:
                profiler.disable()
                profiler.dump_stats(args.profile)
                say(f"  a profile of the ticks, watchdog passes and requests (the loop's thread) in {args.profile}")
            await watch.stop()
    out["stalls"] = {k: v for k, v in watch.worst.items() if k != "start-up"}
    out["busy"] = {k: v for k, v in watch.busy.items() if k != "start-up"}
    out["gc"] = watch.gc_worst
    return out


# --- the serve child -----------------------------------------------------------------------------


def write_config(path: Path, url: str, sim_url: str) -> None:
    path.write_text(
        "[database]\n"
        f"url = {json.dumps(url)}\n"
        "[github]\n"
        f"api_url = {json.dumps(sim_url)}\n"
        'token = "bench"\n'
        'webhook_secret = "bench-secret"\n'
        "[server]\n"
        "port = 0\n"
        'api_token = "bench"\n'
        "[logging]\n"
        'level = "info"\n'
        'format = "json"\n')


def log_events(path: Path) -> Iterator[dict]:
    with contextlib.suppress(FileNotFoundError), path.open() as f:
        for line in f:
            with contextlib.suppress(ValueError):
                yield json.loads(line)


async def wait_for(what: str, check, timeout: float = 300) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (found := await check()) is not None:
            return found
        await asyncio.sleep(0.2)
    raise SystemExit(f"timed out waiting for {what}")


async def jobs_due(url: str) -> int:
    from sqlalchemy import func
    from sqlmodel import col, select

    from storage.database import Database
    from storage.models import Job, utcnow

    db = Database(url)
    try:
        async with db.read_session() as s:
            return (await s.exec(select(func.count()).select_from(Job).where(
                col(Job.status).in_(("queued", "running")), col(Job.run_at) <= utcnow()))).one()
    finally:
        await db.dispose()


async def serve_child(url: str, sim_url: str, work: Path, label: str, args, detail_key: str | None) -> dict:
    config, log = work / f"{label}.toml", work / f"{label}-serve.log"
    write_config(config, url, sim_url)
    with log.open("w") as sink:
        child = subprocess.Popen([sys.executable, "-m", "bot", "--config", str(config), "serve"],
                                 stdout=sink, stderr=sink, cwd=ROOT)
    CHILDREN.append(child)
    try:
        async def listening():
            if child.poll() is not None:
                raise SystemExit(f"serve ended at start-up ({child.returncode}): see {log}")
            return next((e["port"] for e in log_events(log) if e.get("event") == "server.listening"), None)

        port = await wait_for("serve to listen", listening)

        async def ticked():
            return True if any(e.get("event") == "poller.tick" for e in log_events(log)) else None

        await wait_for("serve's first poller tick", ticked)

        async def quiet():
            return True if await jobs_due(url) == 0 else None

        await wait_for("serve's start-up syncs", quiet)
        await asyncio.to_thread(timed_requests, f"http://127.0.0.1:{port}", page_paths(detail_key), 2)
        await asyncio.sleep(3)
        ticks0 = sum(1 for e in log_events(log) if e.get("event") == "poller.tick")
        say(f"  serve (pid {child.pid}) idle for {args.idle_seconds:.0f}s ...")
        cpu0, t0 = idle_poll.proc_cpu(child.pid), time.monotonic()
        samples = [rss_bytes(child.pid)]
        while time.monotonic() - t0 < args.idle_seconds:
            await asyncio.sleep(min(1.0, args.idle_seconds - (time.monotonic() - t0)))
            samples.append(rss_bytes(child.pid))
        cpu, wall = idle_poll.proc_cpu(child.pid) - cpu0, time.monotonic() - t0
        ticks = sum(1 for e in log_events(log) if e.get("event") == "poller.tick") - ticks0
        errors = [e for e in log_events(log) if e.get("level") in ("error", "critical")]
        if errors:
            say(f"  serve logged {len(errors)} error(s), the first: {json.dumps(errors[0])[:300]}")
        return dict(rss=samples[-1], rss_max=max(samples), cpu_percent=100 * cpu / wall, cpu=cpu,
                    wall=wall, ticks=ticks)
    finally:
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        CHILDREN.remove(child)


# --- the run -------------------------------------------------------------------------------------


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def report(label: str, size: int, r: dict) -> None:
    ticks = r["ticks"]
    print(f"{label} (database {mb(size)}):")
    print(f"  poller tick: first {ms(ticks[0])}" + (f", then max {ms(max(ticks[1:]))}" if len(ticks) > 1 else "")
          + f" ({len(ticks)} ticks)")
    print(f"  watchdog pass: p50 {ms(statistics.median(r['watchdog']))}, max {ms(max(r['watchdog']))} "
          f"({len(r['watchdog'])} passes)")
    for path, times in r["requests"].items():
        print(f"  GET {path}: p50 {statistics.median(times):.1f} ms, max {max(times):.1f} ms ({len(times)} requests)")
    stalls = ", ".join(f"{k} {ms(v)} ({ms(r['busy'][k])} of it busy)" for k, v in r["stalls"].items())
    print(f"  worst event loop stall (in-process): {ms(max(r['stalls'].values()))}; by phase: {stalls}; "
          f"the longest garbage collection {ms(r['gc'])}")
    idle = r["idle"]
    print(f"  idle serve child over {idle['wall']:.0f}s ({idle['ticks']} poller ticks): RSS {mb(idle['rss'])} "
          f"(max {mb(idle['rss_max'])}), CPU {idle['cpu_percent']:.2f}% of a core ({idle['cpu']:.2f}s)", flush=True)


def goals(empty: dict, year: dict) -> None:
    def line(what: str, ok: bool) -> None:
        print(f"  {'PASS' if ok else 'FAIL'}  {what}")

    print("goals, on the year's database (upper bounds: a shared 2-core machine):")
    for path, times in year["requests"].items():
        worst = max(times)
        line(f"GET {path}: max {worst:.1f} ms < {REQUEST_GOAL_MS:.0f} ms", worst < REQUEST_GOAL_MS)
    worst = max(year["stalls"], key=lambda k: year["stalls"][k])
    stall, busy = year["stalls"][worst] * 1000, year["busy"][worst] * 1000
    line(f"event loop stall: max {stall:.0f} ms < {STALL_GOAL_MS:.0f} ms (in {worst}; the loop's own CPU in "
         f"it {busy:.0f} ms)", stall < STALL_GOAL_MS)
    ratio = year["idle"]["rss"] / empty["idle"]["rss"]
    line(f"idle RSS: {mb(year['idle']['rss'])} / empty's {mb(empty['idle']['rss'])} = {ratio:.2f}x "
         f"< {RSS_GOAL_RATIO}x", ratio < RSS_GOAL_RATIO)
    cpu, cpu_empty = year["idle"]["cpu_percent"], empty["idle"]["cpu_percent"]
    line(f"idle CPU: {cpu:.2f}% of a core < {CPU_GOAL_PERCENT:.0f}% (empty's {cpu_empty:.2f}%: "
         f"{cpu / cpu_empty if cpu_empty else math.inf:.2f}x)", cpu < CPU_GOAL_PERCENT)
    for name in ("tick", "watchdog"):
        figures = year["ticks"] if name == "tick" else year["watchdog"]
        base = empty["ticks"] if name == "tick" else empty["watchdog"]
        print(f"  ----  {name}: max {ms(max(figures))}, empty's {ms(max(base))} "
              f"({max(figures) / max(base):.2f}x; no goal)")


async def bench(args) -> int:
    import httpx

    from storage.database import Database

    work = Path(tempfile.mkdtemp(prefix="year_"))
    backend = Backend(args.backend, Path(args.db_dir), args.prs, args.keep, args.backlog)
    say(f"opening {args.active} PRs in the simulator (child process) ...")
    sim = subprocess.Popen(
        [sys.executable, idle_poll.__file__, "--simulator-child", str(args.active), str(work / "prs.json"),
         str(work / "github")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    CHILDREN.append(sim)
    try:
        sim_url = ""
        assert sim.stdout is not None
        for line in sim.stdout:
            if line.startswith("URL "):
                sim_url = line.split()[1]
                break
        if not sim_url:
            raise SystemExit("the simulator did not start")
        rows = json.loads((work / "prs.json").read_text())
        async with httpx.AsyncClient(base_url=sim_url, timeout=60,
                                     headers={"Authorization": "token bench"}) as http:
            have = {r["repo"] for r in rows}
            for k in range(REPOS):
                if f"acme/r{k}" not in have:
                    (await http.post("_sim/repos", json={"name": f"acme/r{k}"})).raise_for_status()
        backend.start()
        template = await backend.template()
        results, sizes = {}, {}
        for label, source in (("empty", None), ("year", template)):
            say(f"{label}: preparing the database ...")
            url = await backend.copy(source, f"year_run_{label}")
            db = Database(url)
            try:
                await idle_poll.enroll_rows(db, rows, marks=True)
            finally:
                await db.dispose()
            sizes[label] = await backend.size(url)
            say(f"{label}: {mb(sizes[label])}; in-process measurements ...")
            detail = f"acme/r1#{FIRST_NUMBER}" if source is not None and args.prs > 1 else None
            results[label] = await in_process(url, sim_url, rows, args, label, detail)
            say(f"{label}: the serve child ...")
            results[label]["idle"] = await serve_child(url, sim_url, work, label, args, detail)
            await backend.drop(f"year_run_{label}")  # a copy of the year is as big as the history
        print(f"bench/year.py on {args.backend}: {args.prs} finished PRs over a year + {args.active} active "
              f"(waiting for a review)")
        for label in ("empty", "year"):
            report(label if label == "empty" else f"year ({args.prs} PRs)", sizes[label], results[label])
        goals(results["empty"], results["year"])
        return 0
    finally:
        with contextlib.suppress(Exception):
            await backend.drop()
        backend.stop()
        if sim.stdin is not None:
            with contextlib.suppress(Exception):
                sim.stdin.close()
        shutil.rmtree(work, ignore_errors=True)


def end_children() -> None:
    for child in list(CHILDREN):
        if child.poll() is None:
            child.terminate()
            try:
                child.wait(timeout=15)
            except subprocess.TimeoutExpired:
                child.kill()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prs", type=int, default=120_000, help="finished PRs in the year's history")
    p.add_argument("--active", type=int, default=200, help="PRs still driven (waiting for a review)")
    p.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    p.add_argument("--idle-seconds", type=float, default=60.0)
    p.add_argument("--keep", action="store_true", help="keep the history's template for the next run")
    p.add_argument("--db-dir", default=str(Path(tempfile.gettempdir()) / "convergebot-year"),
                   help="where the SQLite files go (the kept template too)")
    p.add_argument("--ticks", type=int, default=3, help="poller ticks to time")
    p.add_argument("--requests", type=int, default=50, help="requests to each page")
    p.add_argument("--backlog", action="store_true",
                   help="leave the history as a first start of a retention-aware bot finds it (nothing "
                        "compacted or pruned): the ticks then work through the backlog")
    p.add_argument("--profile", default=None,
                   help="write a cProfile of the year's in-process measurements (the loop's thread) here")
    p.add_argument("--slow-callbacks", action="store_true",
                   help="asyncio debug mode: log callbacks over 50 ms (for finding a stall)")
    args = p.parse_args()
    from bot.logs import configure_logging

    configure_logging("warning", stream=sys.stderr)
    try:
        return asyncio.run(bench(args))
    except KeyboardInterrupt:
        say("interrupted")
        return 130
    finally:
        end_children()


if __name__ == "__main__":
    sys.exit(main())
