"""A chaos run: the real `convergebot serve` against the simulator, faults, kills, then checks.

`run_chaos(seed, size, db_url, tmp_path)` opens the seed's PRs in the simulator, starts the bot
as a child process, enrolls every PR with a maintainer's `/converge`, turns the faults on, kills
and restarts the bot on the seed's schedule, plays the maintainer and the author while it waits
(with a deadline) for every PR to end, then checks what the bot promises. It returns a
`Result`; the test asserts that it has no failures.

With `restore` (SQLite), once a PR is in a round the harness takes `convergebot backup` of the
serving database, waits until some PR has moved on, kills the bot and puts the backup in the
database's place before the restart: the bot resumes from a state older than GitHub's, and must
still do nothing twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import sys
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from simulator import Simulator, SimulatorServer
from storage import prs, rounds
from storage.database import Database
from storage.models import Job, utcnow

from .bot_process import BotProcess, free_port, to_toml, utc_now
from .checks import check_promises
from .faults import ApiRates, Chaos, WebhookRates
from .plan import (
    AUTHOR,
    COPILOT,
    MAINTAINER,
    REPO,
    PrPlan,
    kill_schedule,
    make_plan,
    write_fixer_plan,
)

FIXER = Path(__file__).with_name("fixer.py")
SECRET = "chaos-webhook-secret"
HEAL_METRIC = "convergebot_liveness_healed_total"
FIXER_TIMEOUT = 12.0
ESCALATION_TAG = re.compile(r"convergebot escalation #(\d+)")
OUR_QUESTION = "keep its public name"
FINAL = ("merged", "converged", "abandoned")
# A PR whose status, round and last action have not changed for this long is stuck: far longer
# than any quiet spell on purpose (a kill takes its running fixer; its job's lease must expire).
STALL_SECONDS = 120.0


@dataclass(frozen=True)
class Size:
    prs: int
    kills: int
    seeds: tuple[int, ...]

    @classmethod
    def from_env(cls) -> Size:
        env = os.environ
        return cls(prs=int(env.get("CONVERGEBOT_CHAOS_PRS", "10")),
                   kills=int(env.get("CONVERGEBOT_CHAOS_KILLS", "2")),
                   seeds=tuple(int(s) for s in env.get("CONVERGEBOT_CHAOS_SEEDS", "1").split(",")))

    @property
    def deadline(self) -> float:
        """Seconds every PR gets to finish after enrollment, with room for each kill's cost."""
        return 120 + 4 * self.prs + (FIXER_TIMEOUT + 75) * self.kills

    @property
    def kill_window(self) -> float:
        return 6 + 1.2 * self.prs

    @property
    def pytest_timeout(self) -> int:
        return int(self.deadline + 240)


@dataclass
class Result:
    seed: int
    backend: str
    failures: list[str] = field(default_factory=list)
    summary: str = ""
    context: str = ""

    def report(self) -> str:
        return "\n".join([f"chaos run failed (seed {self.seed}, {self.backend}):",
                          *(f"  - {f}" for f in self.failures), "", self.summary, "", self.context])


def bot_config(db_url: str, api_url: str, port: int, plan_file: Path) -> dict:
    return {
        "database": {"url": db_url},
        "logging": {"level": "info", "format": "json"},
        "jobs": {"workers": 4, "lease_seconds": 10.0, "idle_poll_seconds": 0.2,
                 "backoff_base_seconds": 0.2, "backoff_cap_seconds": 2.0},
        "github": {"api_url": api_url, "token": "chaos-token", "webhook_secret": SECRET,
                   "timeout_seconds": 3.0, "read_timeout_seconds": 5.0},
        "server": {"host": "127.0.0.1", "port": port, "shutdown_grace_seconds": 3.0},
        "poller": {"interval_seconds": 1.0, "jitter_seconds": 0.0},
        "convergence": {"reviewers": [COPILOT], "maintainers": [MAINTAINER],
                        "review_wait_timeout_seconds": 600.0, "nudge_window_seconds": 600.0},
        # Sandboxed where bubblewrap works, as by default; the chaos fixer leaves its signals
        # beside its plan, so that directory is writable from the sandbox.
        "fixer": {"kind": "command", "command": [sys.executable, str(FIXER), str(plan_file)],
                  "timeout_seconds": FIXER_TIMEOUT, "sandbox_write": [str(plan_file.parent)]},
    }


class ChaosRun:
    def __init__(self, seed: int, size: Size, db_url: str, tmp: Path, *, restore: bool = False) -> None:
        self.seed, self.size, self.db_url, self.tmp = seed, size, db_url, tmp
        self.restore = restore
        self.backup: Path | None = None
        self.restored = False
        self.restored_at = 0.0  # time.monotonic() of the restore
        # Each PR's rounds (run, number, entry head) as the killed bot left them: a restore
        # forgets those begun since the backup, and their review requests were made all the same.
        self.forgotten_rounds: dict[str, set[tuple[str | None, int, str | None]]] = {}
        self.answered_at: dict[int, float] = {}  # PR -> when the maintainer last answered
        self.answered_again: list[int] = []
        self.backend = "postgres" if db_url.startswith("postgres") else "sqlite"
        self.plans = make_plan(seed, size.prs)
        self.signals = tmp / "signals"
        self.log_path = tmp / "bot.log"
        self.result = Result(seed, self.backend)
        self.sim = Simulator(root=tmp / "github")
        self.chaos = Chaos(self.sim)  # served through its app, which may wrap the simulator's
        self.bot: BotProcess | None = None
        self.kills_done = 0
        self.crashes: list[int] = []
        self.heals = 0.0
        self.heals_now = 0.0  # the counter of the running process (it resets on restart)
        self.heal_metric_seen = False
        self.author_pushes: dict[int, str] = {}
        self.answered: dict[int, list[int]] = {}
        self.unexpected: dict[int, list[str]] = {}
        self.views: dict[str, prs.PrView] = {}
        self.kill_times: list[str] = []
        self.stalled: dict[int, str] = {}
        self._seen: dict[int, tuple[tuple, float]] = {}  # PR -> (status, round, action), since
        self._comments_seen = 0
        self.rounds_of: dict[int, int] = {}
        self.duplicates: list[dict] = []
        self.forced: list[dict] = []

    # -- the run ---------------------------------------------------------------------------

    async def run(self) -> Result:
        started = time.monotonic()
        self.db = Database(self.db_url)
        try:
            with simulator_log(self.tmp / "simulator.log"):
                async with SimulatorServer(self.sim, app=self.chaos.app) as server:
                    await self._run_against(server.url)
        except Exception as e:  # reported with the seed, the config and the log, not bare
            self.fail(f"the run stopped: {type(e).__name__}: {e}")
            self.result.context += "\n" + traceback.format_exc()
        finally:
            self.result.summary = self._summary(time.monotonic() - started)
            await self.db.dispose()
            if self.result.failures and self.bot is not None:
                self.result.context += (f"\nkills at {self.kill_times}\n"
                                        f"last 50 lines of the bot log:\n{self.bot.tail(50)}")
        return self.result

    async def _run_against(self, api_url: str) -> None:
        self.signals.mkdir(parents=True)
        plan_file = self.tmp / "plan.json"
        write_fixer_plan(plan_file, self.plans, self.signals, hang_seconds=FIXER_TIMEOUT + 4,
                         push_wait_seconds=6.0)
        await self._open_prs()
        port = free_port()
        config = bot_config(self.db_url, api_url, port, plan_file)
        config_file = self.tmp / "convergebot.toml"
        config_file.write_text(to_toml(config))
        self.bot = BotProcess(config_file, self.log_path, port, self.tmp / "bot-tmp")
        self.result.context = (f"seed {self.seed} · backend {self.backend} · faults "
                               f"{self.chaos.mode}\nconfig {config_file}:\n{to_toml(config)}\n"
                               f"bot log: {self.log_path}\n"
                               f"simulator log: {self.tmp / 'simulator.log'}")
        self.sim.configure_webhooks(f"{self.bot.url}/webhook", SECRET)
        self.chaos.api_on(self.seed, ApiRates())
        await self.bot.start()
        try:
            await self._enroll()
            self.chaos.webhooks_on(self.seed, WebhookRates())
            await self._drive()
            self.chaos.off()
            await self._quiesce()
            await self._read_heals()
            self.heals += self.heals_now
        finally:
            code = await self.bot.terminate()
        if code != 0:
            self.fail(f"the bot did not exit cleanly on SIGTERM (exit code {code})")
        await check_promises(self)

    def fail(self, text: str) -> None:
        self.result.failures.append(text)

    async def _open_prs(self) -> None:
        await self.sim.create_repo(REPO, files={"README.md": "# chaos\n"},
                                   collaborators={MAINTAINER: "write", AUTHOR: "write"})
        for p in self.plans:
            pr = await self.sim.open_pr(REPO, title=f"Chaos {p.kind} #{p.number}", head=p.head,
                                        author=AUTHOR, body=p.body,
                                        files={p.path: f"PR {p.number}: {p.kind}\n"})
            assert pr.number == p.number, "PRs are opened in plan order"
            self.sim.set_reviewer(REPO, p.reviewer(), number=p.number)

    async def _enroll(self) -> None:
        """Every PR gets a maintainer's `/converge` while webhooks are still delivered reliably:
        until enrolled, only a webhook tells the bot about a PR."""
        for p in self.plans:
            await self.sim.comment(REPO, p.number, "/converge", user=MAINTAINER)
        deadline = time.monotonic() + 60 + self.size.prs
        while time.monotonic() < deadline:
            await self.read_views()
            if all(p.key in self.views for p in self.plans):
                return
            await asyncio.sleep(0.5)
        missing = [p.key for p in self.plans if p.key not in self.views]
        raise AssertionError(f"not enrolled within the deadline: {missing}")

    async def _drive(self) -> None:
        t0 = time.monotonic()
        schedule = kill_schedule(self.seed, self.size.kills, self.size.kill_window)
        deadline = t0 + self.size.deadline
        next_metrics = 0.0
        while True:
            await self.read_views()
            self._watch_stalls()
            await self._play_people()
            if all(self._final(p) for p in self.plans) or time.monotonic() > deadline:
                return
            if self.bot.exited is not None:  # nobody killed it: a crash
                self.crashes.append(self.bot.exited)
                self.heals += self.heals_now
                self.heals_now = 0.0
                await self.bot.start()
            if self.restore and self.backup is None and any(
                    v.pr.current_round and v.derived_status not in FINAL for v in self.views.values()):
                await self._backup_and_restore()
            if schedule and time.monotonic() - t0 >= schedule[0][0]:
                _, pause = schedule.pop(0)
                await self._kill_and_restart(pause)
            if time.monotonic() >= next_metrics:
                await self._read_heals()
                next_metrics = time.monotonic() + 2.0
            await asyncio.sleep(0.25)

    async def _kill_and_restart(self, pause: float) -> None:
        await self._read_heals()
        self.heals += self.heals_now
        self.heals_now = 0.0
        self.kill_times.append(utc_now())
        await self.bot.kill()
        self.kills_done += 1
        await asyncio.sleep(pause)  # the seeded downtime: webhooks meanwhile are lost
        await self.bot.start()

    async def _backup_and_restore(self) -> None:
        """`convergebot backup` while the bot serves PRs in flight; then, once some PR has moved
        on, a kill and the backup in the database's place, and a restart."""
        self.backup = self.tmp / "backup.db"
        await self.bot.backup(self.backup)
        await self._until_moved_on()
        await self._read_heals()
        self.heals += self.heals_now
        self.heals_now = 0.0
        self.kill_times.append(utc_now())
        await self.bot.kill()
        for p in self.plans:  # read before the file is replaced: what the restore forgets
            self.forgotten_rounds[p.key] = {(r.process_key, r.round_no, r.entry_head)
                                            for r in await rounds.for_pr(self.db, p.key)}
        await self._restore()
        await self.bot.start()

    async def _until_moved_on(self, timeout: float = 30.0) -> None:
        """Until some PR has moved past what the backup holds (its status or round), so that the
        restore takes the bot back in time; at most `timeout`."""
        def where() -> dict[str, tuple]:
            return {k: (v.derived_status, v.pr.current_round) for k, v in self.views.items()}

        await self.read_views()
        then, deadline = where(), time.monotonic() + timeout
        while time.monotonic() < deadline and where() == then:
            await self._play_people()
            await asyncio.sleep(0.25)
            await self.read_views()

    async def _restore(self) -> None:
        """The backup in the killed bot's database's place, as an operator restores one. The
        harness's own connections go first: one kept open would read the old file's WAL."""
        assert self.backup is not None and self.db_url.startswith("sqlite:///")
        await self.db.dispose()
        self.db = Database(self.db_url)
        live = Path(self.db_url.removeprefix("sqlite:///"))
        for side in (Path(f"{live}-wal"), Path(f"{live}-shm")):
            side.unlink(missing_ok=True)
        live.write_bytes(self.backup.read_bytes())
        self.restored = True
        self.restored_at = time.monotonic()
        self.bot.note(f"restored {self.backup} over {live}")

    async def _read_heals(self) -> None:
        got = await self.bot.metric(HEAL_METRIC)
        if got is not None:
            present, value = got
            self.heal_metric_seen |= present
            self.heals_now = value

    async def read_views(self) -> None:
        self.views = {v.pr.pr_key: v for v in await prs.list_all(self.db)}

    def status_of(self, p: PrPlan) -> str:
        view = self.views.get(p.key)
        return view.derived_status if view else "not enrolled"

    def _watch_stalls(self) -> None:
        now = time.monotonic()
        for p in self.plans:
            view = self.views.get(p.key)
            pr = view.pr if view else None
            sig = (self.status_of(p), pr and pr.current_round, pr and pr.last_action)
            if self._seen.get(p.number, (None,))[0] != sig:
                self._seen[p.number] = (sig, now)
            elif (now - self._seen[p.number][1] > STALL_SECONDS and sig[0] != "waiting_deps"
                  and not self._final(p) and not self._answer_in_flight(p)):
                self.stalled[p.number] = f"no progress for {STALL_SECONDS:.0f}s at {sig}"

    def _answer_in_flight(self, p: PrPlan) -> bool:
        """The maintainer's answer is still in the simulator's webhook queue (not yet sent)."""
        return any(d.event == "issue_comment" and not d.dropped and not d.attempts
                   and p.answer_token.encode() in d.body for d in self.sim.deliveries)

    def _final(self, p: PrPlan) -> bool:
        """Ended, or stuck for good: waiting on a question the maintainer will not answer (not in
        its script), or on a dependency that ended without merging."""
        status = self.status_of(p)
        if status == "waiting_deps" and p.depends_on is not None:
            dep = self.plans[p.depends_on - 1]
            return self._final(dep) and self.status_of(dep) != "merged"
        return (status in FINAL or p.number in self.stalled
                or (status == "escalated" and p.number in self.unexpected))

    async def _play_people(self) -> None:
        """The author pushes while its fixer runs; the maintainer answers scripted questions."""
        for p in self.plans:
            ready = (self.signals / f"ready-{p.number}").exists()
            if p.kind == "author_push" and ready and p.number not in self.author_pushes:
                self.author_pushes[p.number] = await self.sim.push(
                    REPO, p.head, {f"chaos/pr{p.number}-author.txt": "the author's own change\n"},
                    message="Author: my own change", author=AUTHOR)
                (self.signals / f"pushed-{p.number}").write_text(self.author_pushes[p.number])
        comments = self.sim.effects("issue_comment")
        for c in comments[self._comments_seen:]:
            tag = ESCALATION_TAG.search(c.get("body", ""))
            if tag is None or c.get("repo") != REPO:
                continue
            p = self.plans[c["number"] - 1]
            if p.kind == "escalate" and OUR_QUESTION in c["body"]:
                done = self.answered.setdefault(p.number, [])
                if int(tag[1]) not in done:
                    done.append(int(tag[1]))
                    await self._answer(p)
            else:
                self.unexpected.setdefault(p.number, []).append(c["body"].splitlines()[0])
        self._comments_seen = len(comments)
        if self.restored:
            await self._answer_again()

    async def _answer(self, p: PrPlan) -> None:
        self.answered_at[p.number] = time.monotonic()
        await self.sim.comment(REPO, p.number, f"/converge answer Keep it ({p.answer_token}).", user=MAINTAINER)

    async def _answer_again(self) -> None:
        """After a restore, an answer the restored database never saw (given after the backup,
        or to the question the run had not yet asked again: the bot replies that nothing is open)
        is given again, once, by a maintainer who finds the PR still escalated a while later: the
        documented cost of a restore (docs/operations.md, "Backups")."""
        for p in self.plans:
            answered = self.answered_at.get(p.number)
            if (p.kind == "escalate" and answered is not None and time.monotonic() - answered > 15
                    and p.number not in self.answered_again and self.status_of(p) == "escalated"):
                self.answered_again.append(p.number)
                await self._answer(p)

    async def _quiesce(self, timeout: float = 30.0) -> None:
        """Let retries and late effects land before counting writes (no fixed sleep: until no
        due job is queued or running three checks in a row, or the timeout)."""
        from sqlmodel import select

        with_timeout = time.monotonic() + timeout
        calm = 0
        while calm < 3 and time.monotonic() < with_timeout:
            async with self.db.session() as s:
                busy = (await s.exec(select(Job.id).where(
                    Job.status.in_(["queued", "running"]), Job.run_at <= utcnow()))).all()
            calm = 0 if busy else calm + 1
            await asyncio.sleep(0.3)
        try:
            await self.sim.settle(timeout=10)
        except TimeoutError:
            pass

    def _summary(self, wall: float) -> str:
        finals = Counter(self.status_of(p) for p in self.plans)
        by_class: Counter[str] = Counter()
        snapshot = self.sim.counters.snapshot()
        for statuses in snapshot["routes"].values():
            for status, n in statuses.items():
                by_class["dropped" if status == "0" else f"{status[0]}xx"] += n
        heals = f"{self.heals:g}" if self.heal_metric_seen else "0 (no metric)"
        return (f"chaos seed={self.seed} backend={self.backend} prs={len(self.plans)} "
                f"final={dict(sorted(finals.items()))} "
                f"requests={snapshot['total']} {dict(sorted(by_class.items()))} "
                f"faults={self.chaos.injected()} hook_lag_max={self.chaos.webhook_lag_max():g}s "
                f"kills={self.kills_done}/{self.size.kills} "
                f"crashes={len(self.crashes)} duplicates={len(self.duplicates)} "
                f"forced_pushes={len(self.forced)} heals={heals} "
                f"rounds={sum(self.rounds_of.values())} wall={wall:.1f}s"
                + (f" restored={self.restored} answered_again={len(self.answered_again)}"
                   if self.restore else ""))


@contextlib.contextmanager
def simulator_log(path: Path):
    """The in-process simulator's log lines (webhooks dropped by chaos, scripted reviews) go to
    a file of the run for the duration, not to the test's output."""
    previous = structlog.get_config()
    with path.open("w") as out:
        structlog.configure(
            processors=[structlog.processors.add_log_level,
                        structlog.processors.TimeStamper(fmt="iso", utc=True),
                        structlog.processors.JSONRenderer()],
            wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
            logger_factory=structlog.WriteLoggerFactory(file=out), cache_logger_on_first_use=False)
        try:
            yield
        finally:
            structlog.configure(**previous)


async def run_chaos(seed: int, size: Size, db_url: str, tmp: Path, *, restore: bool = False) -> Result:
    run = ChaosRun(seed, size, db_url, tmp, restore=restore)
    result = await run.run()
    if restore and not run.restored:
        result.failures.append("the backup was never restored (fewer than two kills?)")
    (tmp / "summary.json").write_text(json.dumps({"summary": result.summary,
                                                  "failures": result.failures}, indent=2))
    return result
