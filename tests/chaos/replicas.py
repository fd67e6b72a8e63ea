"""Several real `convergebot serve` processes on one PostgreSQL database, behind one webhook
load balancer, against one simulator; the leader is SIGKILLed mid-run.

`run_replicas(n, prs, db_url, tmp)` opens the PRs, starts n replicas, enrolls every PR through
every replica at once (the HTTP API), waits until the run is well under way, SIGKILLs the
replica that leads, waits (with a deadline) for every PR to merge, and returns what a test
asserts on: runs per PR, review requests per round, merges per PR, writes done twice, and which
replica ran each poller cycle.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from simulator import Simulator, SimulatorServer
from storage import prs, rounds, runs
from storage.database import Database

from .bot_process import BotProcess, free_port, to_toml
from .checks import REVIEW_REQUESTS
from .faults import Chaos
from .harness import bot_config, simulator_log
from .plan import AUTHOR, MAINTAINER, REPO, PrPlan, write_fixer_plan

API_TOKEN = "replica-api-token"


class Balancer:
    """The load balancer in front of the replicas: each webhook goes to the next replica in
    turn, and to the one after it when that one does not answer (a dead replica)."""

    def __init__(self, replicas: list[BotProcess]) -> None:
        self.replicas = replicas
        self._turn = itertools.count()  # taken modulo the replicas there are now (a deploy adds and removes)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.sent: Counter[int] = Counter()
        self._http = httpx.AsyncClient(timeout=10)
        app = Starlette(routes=[Route("/webhook", self._forward, methods=["POST"])])
        self._server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port,
                                                     log_config=None, access_log=False, lifespan="off"))
        self._task: asyncio.Task | None = None

    async def _forward(self, request: Request) -> Response:
        body = await request.body()
        headers = {k: v for k, v in request.headers.items() if k.lower().startswith("x-") or k.lower() == "content-type"}
        for _ in range(len(self.replicas)):
            i = next(self._turn) % len(self.replicas)
            try:
                answer = await self._http.post(f"{self.replicas[i].url}/webhook", content=body, headers=headers)
            except httpx.HTTPError:
                continue
            self.sent[i] += 1
            return Response(answer.content, status_code=answer.status_code,
                            media_type=answer.headers.get("content-type"))
        return Response(b"no replica answered", status_code=502)

    async def __aenter__(self) -> Balancer:
        self._task = asyncio.create_task(self._server.serve())
        deadline = time.monotonic() + 10
        while not self._server.started:
            if self._task.done() or time.monotonic() > deadline:
                raise RuntimeError("the balancer did not start")
            await asyncio.sleep(0.02)
        return self

    async def __aexit__(self, *exc) -> None:
        self._server.should_exit = True
        await asyncio.wait_for(self._task, 10)
        await self._http.aclose()


@dataclass
class ReplicaResult:
    replicas: int
    merged: list[str] = field(default_factory=list)
    not_merged: dict[str, str] = field(default_factory=dict)
    runs_per_pr: dict[str, int] = field(default_factory=dict)
    rounds_per_pr: dict[str, int] = field(default_factory=dict)
    requests_per_pr: dict[str, int] = field(default_factory=dict)
    merges_per_pr: dict[str, int] = field(default_factory=dict)
    duplicates: list[dict] = field(default_factory=list)
    enroll_outcomes: Counter[str] = field(default_factory=Counter)
    killed: int | None = None  # which replica was SIGKILLed (it led when killed)
    # Each poller cycle, in time order: which replica ran it.
    tick_owners: list[int] = field(default_factory=list)
    leaderships_taken: list[int] = field(default_factory=list)
    webhooks_by_replica: dict[int, int] = field(default_factory=dict)
    wall: float = 0.0

    def summary(self) -> str:
        return (f"replicas={self.replicas} merged={len(self.merged)} not_merged={self.not_merged} "
                f"enrollments={dict(self.enroll_outcomes)} killed={self.killed} "
                f"leaderships={self.leaderships_taken} ticks_by={dict(Counter(self.tick_owners))} "
                f"webhooks_by={self.webhooks_by_replica} duplicates={len(self.duplicates)} "
                f"wall={self.wall:.1f}s")


async def run_replicas(n: int, count: int, db_url: str, tmp: Path, *, deadline: float) -> ReplicaResult:
    result = ReplicaResult(replicas=n)
    started = time.monotonic()
    sim = Simulator(root=tmp / "github")
    chaos = Chaos(sim)
    plans = [PrPlan(i, "converge", (1,)) for i in range(1, count + 1)]  # two rounds each
    db = Database(db_url)
    bots: list[BotProcess] = []
    try:
        with simulator_log(tmp / "simulator.log"):
            async with SimulatorServer(sim, app=chaos.app) as server:
                await open_planned(sim, plans, tmp, "Replica")
                for i in range(n):
                    port = free_port()
                    config = bot_config(db_url, server.url, port, tmp / "plan.json")
                    config["server"]["api_token"] = API_TOKEN
                    path = tmp / f"replica-{i}.toml"
                    path.write_text(to_toml(config))
                    bots.append(BotProcess(path, tmp / f"replica-{i}.log", port, tmp / f"replica-{i}-tmp"))
                await asyncio.gather(*(b.start() for b in bots))
                async with Balancer(bots) as balancer:
                    sim.configure_webhooks(f"{balancer.url}/webhook", "chaos-webhook-secret")
                    await _enroll_everywhere(bots, plans, result)
                    await _until(db, plans, lambda views: sum(
                        v.pr.current_round >= 2 or v.derived_status == "merged" for v in views) >= count // 3,
                        deadline, "a third of the PRs in round 2")
                    result.killed = await _leader(bots)
                    await bots[result.killed].kill()
                    await _until(db, plans, lambda views: all(v.derived_status in ("merged", "abandoned", "converged")
                                                              for v in views) and len(views) == count,
                                 deadline, "every PR ended")
                    await sim.settle(timeout=10)
                    result.webhooks_by_replica = dict(balancer.sent)
                # What the replicas do while they stop one by one (the next one takes the
                # leadership a stopping leader let go) is not the run's.
                stopping_at = datetime.now(UTC)
                for b in bots:
                    await b.terminate()
                await _collect(db, sim, chaos, plans, bots, result, until=stopping_at)
    finally:
        for b in bots:
            if b.exited is None and b.proc is not None:
                await b.kill()
        await db.dispose()
        result.wall = time.monotonic() - started
    return result


async def open_planned(sim: Simulator, plans: list[PrPlan], tmp: Path, label: str) -> None:
    """The repository and the planned PRs on the simulator, each with its reviewer, and the
    chaos fixer's plan (tmp/plan.json, its signals beside it)."""
    await sim.create_repo(REPO, files={"README.md": f"# {label.lower()}\n"},
                          collaborators={MAINTAINER: "write", AUTHOR: "write"})
    for p in plans:
        await sim.open_pr(REPO, title=f"{label} PR #{p.number}", head=p.head, author=AUTHOR,
                          body=p.body, files={p.path: f"PR {p.number}\n"})
        sim.set_reviewer(REPO, p.reviewer(), number=p.number)
    (tmp / "signals").mkdir(parents=True)
    write_fixer_plan(tmp / "plan.json", plans, tmp / "signals", hang_seconds=1, push_wait_seconds=0)


async def _enroll_everywhere(bots: list[BotProcess], plans: list[PrPlan], result: ReplicaResult) -> None:
    """Every PR submitted through every replica at the same moment."""
    async with httpx.AsyncClient(timeout=30, headers={"authorization": f"Bearer {API_TOKEN}"}) as http:
        answers = await asyncio.gather(*(http.post(f"{b.url}/api/prs", json={"pr": p.key})
                                         for p in plans for b in bots))
    for a in answers:
        a.raise_for_status()
        result.enroll_outcomes[a.json()["outcome"]] += 1


async def _leader(bots: list[BotProcess], timeout: float = 30) -> int:
    """The replica whose readiness says it ran the last poll itself."""
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient(timeout=5) as http:
        while time.monotonic() < deadline:
            for i, b in enumerate(bots):
                if b.exited is None and (await http.get(f"{b.url}/readyz")).json().get("leader"):
                    return i
            await asyncio.sleep(0.2)
    raise AssertionError("no replica says it leads")


async def _until(db: Database, plans: list[PrPlan], done, deadline: float, what: str) -> None:
    keys = {p.key for p in plans}
    until = time.monotonic() + deadline
    while time.monotonic() < until:
        views = [v for v in await prs.list_all(db) if v.pr.pr_key in keys]
        if done(views):
            return
        await asyncio.sleep(0.5)
    views = {v.pr.pr_key: (v.derived_status, v.pr.current_round) for v in await prs.list_all(db)}
    raise AssertionError(f"not reached within {deadline:.0f}s: {what}; PRs {views}")


def log_lines(path: Path) -> list[dict]:
    """A bot's JSON log lines (uvicorn's and a traceback's plain lines left out)."""
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(event, dict):
            out.append(event)
    return out


def _events(path: Path, names: set[str]) -> list[tuple[datetime, str]]:
    return [(datetime.fromisoformat(e["timestamp"].replace("Z", "+00:00")), e["event"])
            for e in log_lines(path) if e.get("event") in names and e.get("timestamp")]


async def _collect(db: Database, sim: Simulator, chaos: Chaos, plans: list[PrPlan],
                   bots: list[BotProcess], result: ReplicaResult, *, until: datetime) -> None:
    views = {v.pr.pr_key: v for v in await prs.list_all(db)}
    effects = sim.side_effects
    for p in plans:
        view = views.get(p.key)
        if view is not None and view.derived_status == "merged":
            result.merged.append(p.key)
        else:
            result.not_merged[p.key] = view.derived_status if view else "not enrolled"
        result.runs_per_pr[p.key] = len(await runs.runs_for(db, p.key))
        result.rounds_per_pr[p.key] = len(await rounds.for_pr(db, p.key))
        result.requests_per_pr[p.key] = sum(1 for e in effects if e["kind"] in REVIEW_REQUESTS
                                            and e.get("number") == p.number)
        result.merges_per_pr[p.key] = sum(1 for e in effects if e["kind"] == "merge" and e.get("number") == p.number)
    result.duplicates = chaos.duplicates()
    ticks: list[tuple[datetime, int]] = []
    taken: list[tuple[datetime, int]] = []
    for i, b in enumerate(bots):
        for at, name in _events(b.log_path, {"poller.tick", "leadership.taken"}):
            if at < until:
                (ticks if name == "poller.tick" else taken).append((at, i))
    result.tick_owners = [i for _, i in sorted(ticks)]
    result.leaderships_taken = [i for _, i in sorted(taken)]
