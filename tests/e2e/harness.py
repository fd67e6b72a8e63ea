"""The real bot (`serve`'s stack) against the real simulator, webhooks flowing both ways."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulator import ReviewerScript, ReviewStep, Simulator, SimulatorServer, ThreadSpec
from storage import escalations, prs, rounds
from storage.keys import PrKey, parse_pr_key
from storage.prs import PrView

from ..helpers import polled, until
from ..serving import WEBHOOK_SECRET, make_config, serving

REPO = "acme/app"
COPILOT = "copilot-pull-request-reviewer[bot]"
FILES = {"README.md": "# app\n", "app/core.py": "def f():\n    return 1\n", "app/util.py": "X = 1\n"}


def steps(*counts: int, path: str = "app/core.py", delay: float = 0.1, forever: int = 40) -> ReviewerScript:
    """A Copilot script whose n-th review leaves counts[n] threads.

    A last count above zero goes on (up to `forever` reviews) with new texts each review: a
    reviewer repeating a finding already fixed is answered from the record, not a new round
    (docs/architecture.md, "Findings: severity, carried over, grouped").
    """
    if counts and counts[-1]:
        counts = counts + (counts[-1],) * max(0, forever - len(counts))
    return ReviewerScript(
        steps=[ReviewStep(threads=[ThreadSpec(path=path, line=1, body=f"finding {i} of review {n}")
                                   for i in range(c)],
                          body=f"Copilot reviewed and generated {c} comments.", state="COMMENTED")
               for n, c in enumerate(counts)],
        login=COPILOT, delay=delay)


@dataclass
class Harness:
    sim: Simulator
    sim_url: str
    rt: Any
    http: Any

    async def http_github(self, path: str) -> dict:
        import httpx

        async with httpx.AsyncClient(base_url=self.sim_url) as c:
            r = await c.get(path.lstrip("/"), headers={"Authorization": "token t"})
            r.raise_for_status()
            return r.json()

    async def view(self, key: str) -> PrView | None:
        return await prs.get(self.rt.db, key)

    async def wait_for(self, what: str, check: Callable[[], Awaitable[Any]], timeout: float = 30) -> Any:
        return await until(what, check, timeout)

    async def wait_status(self, key: str, *statuses: str, timeout: float = 30) -> PrView:
        async def check():
            v = await self.view(key)
            return v if v is not None and v.derived_status in statuses else None

        try:
            return await self.wait_for(f"{key} in {statuses}", check, timeout)
        except AssertionError:
            v = await self.view(key)
            raise AssertionError(f"{key} is {v and v.derived_status} ({v and v.pr.last_action}), "
                                 f"wanted {statuses}") from None

    async def rounds(self, key: str):
        return await rounds.for_pr(self.rt.db, key)

    async def escalations(self, key: str):
        return await escalations.for_pr(self.rt.db, key)

    def bot_comments(self, number: int) -> list[dict]:
        """Issue comments the bot posted on PR `number`, through the REST API."""
        return [e for e in self.sim.effects("issue_comment") if e.get("number") == number]


def bot_config(db_url: str, api_url: str, *, fixer_config: dict | None = None, **sections: dict):
    """The bot's config for a run against the simulator at `api_url` (`bot_on_simulator`'s)."""
    conv = {"reviewers": [COPILOT], "maintainers": ["maint"], "review_wait_timeout_seconds": 60,
            "nudge_window_seconds": 30, "escalation_heal_grace_seconds": 300}
    conv |= sections.pop("convergence", {})
    return make_config(
        db_url, api_url=api_url,
        convergence=conv,
        fixer={"kind": "fake", "timeout_seconds": 20, **(fixer_config or {})},
        poller={"interval_seconds": 2, "jitter_seconds": 0, **sections.pop("poller", {})},
        jobs={"workers": 4, **sections.pop("jobs", {})},
        **sections,
    )


@asynccontextmanager
async def bot_on_simulator(tmp_path: Path, db_url: str, *, fixer=None, fixer_config: dict | None = None,
                           collaborators=None, **sections: dict):
    """`fixer`: a fixer object to use (e.g. a ScriptedFixer); else built from `fixer_config`."""
    sim = Simulator(root=tmp_path / "github")
    async with SimulatorServer(sim) as server:
        await sim.create_repo(REPO, files=FILES, collaborators=collaborators or {
            "maint": "write", "reader": "read", "admin": "admin"})
        config = bot_config(db_url, server.url, fixer_config=fixer_config, **sections)
        async with serving(config, fixer=fixer) as (rt, http):
            sim.configure_webhooks(f"{http.base_url}/webhook", WEBHOOK_SECRET)
            # The start-up poll tick, over before the test begins: on a loaded machine it could
            # come after the test's PR was opened and sync it (a review wait of a second then
            # ran out in that sync, not in the step the test drives).
            await until("the poller's start-up tick", lambda: polled(rt), timeout=60)
            yield Harness(sim, server.url, rt, http)


class HeldFixer:
    """Keeps its rounds at work (`converging`) until released, then pushes. `first_only`: holds
    only the first PR it runs for (one fixer worker then stays busy with it) and runs the others
    at once, recording their PRs in `ran`."""

    kind = "fake"

    def __init__(self, *, first_only: bool = False) -> None:
        from bot.fixers import ScriptedFixer

        self.first_only = first_only
        self.held: str | None = None
        self.ran: list[str] = []
        self.started, self.release = asyncio.Event(), asyncio.Event()
        self.inner = ScriptedFixer(["push"])

    async def at_work(self) -> bool:
        """A held run has started (for `Harness.wait_for`)."""
        return self.started.is_set()

    async def run(self, req):
        if not self.first_only or self.held in (None, req.pr_key):
            self.held = self.held or req.pr_key
            self.started.set()
            await self.release.wait()
        else:
            self.ran.append(req.pr_key)
        return await self.inner.run(req)


class Recording:
    """Wraps a real fixer and keeps every request it was handed (to see instructions)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.kind = inner.kind
        self.requests: list = []

    async def run(self, req):
        self.requests.append(req)
        return await self.inner.run(req)


async def open_and_enroll(h: Harness, *, head: str = "feat", command: str = "/converge",
                          files: dict | None = None) -> tuple[PrKey, int]:
    pr = await h.sim.open_pr(REPO, title=f"Change {head}", head=head, author="dev",
                             files=files or {"app/core.py": "def f():\n    return 2\n"})
    await h.sim.comment(REPO, pr.number, command, user="maint")
    return parse_pr_key(f"{REPO}#{pr.number}"), pr.number


def due_soon():
    """Jobs due before this count as work still under way: a check-run update waits out its
    settle window before it runs."""
    from datetime import timedelta

    from storage.models import utcnow
    from tests.serving import CHECK_RUN_SETTLE_SECONDS

    return utcnow() + timedelta(seconds=CHECK_RUN_SETTLE_SECONDS + 0.5)


async def quiesce(h: Harness, timeout: float = 20) -> None:
    """Wait until webhooks are delivered and no job due now (or within a check-run update's
    settle window) is queued or running."""
    from sqlmodel import select

    from storage.models import Job

    deadline = time.monotonic() + timeout
    calm = 0
    while calm < 3:
        await h.sim.settle()
        async with h.rt.db.session() as s:
            busy = (await s.exec(select(Job).where(
                Job.status.in_(["queued", "running"]), Job.run_at <= due_soon()))).all()
        calm = 0 if busy else calm + 1
        if time.monotonic() > deadline:
            raise AssertionError(f"still busy: {[(j.kind, j.status) for j in busy]}")
        await asyncio.sleep(0.1)
