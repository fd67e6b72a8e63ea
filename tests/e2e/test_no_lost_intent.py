"""No lost intent: with webhooks dropped at random and the bot down for 30 s in the middle, every
`/converge` comment, `converge` label and auto-enroll author PR sent meanwhile takes effect
exactly once, through redelivery or the repository scan; with redelivery off, the scan alone.

The real `convergebot serve` as a child process (a GitHub App, SIGKILLed, then started again)
against the real simulator; what happened is read from the bot's database and the simulator's
records.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter

import pytest

from simulator import Simulator, SimulatorServer
from storage import commands, prs, runs
from storage.database import Database

from ..chaos.bot_process import BotProcess, free_port, to_toml
from ..helpers import app_private_key, until
from ..serving import WEBHOOK_SECRET

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

REPO = "acme/app"
AUTO = "renovate-dev"  # an auto-enroll author
DOWN_SECONDS = 30.0
EACH = 3  # intents of each kind, before the kill and again while the bot is down


class Intents:
    """What the people did, to check that each took effect once."""

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self.commanded: dict[int, int] = {}  # comment id -> PR number
        self.labeled: list[int] = []
        self.authored: list[int] = []
        self._n = 0

    async def _pr(self, author: str = "dev") -> int:
        self._n += 1
        pr = await self.sim.open_pr(REPO, title=f"Change {self._n}", head=f"change-{self._n}", author=author,
                                    files={f"c{self._n}.py": f"N = {self._n}\n"})
        return pr.number

    async def send(self) -> None:
        for _ in range(EACH):
            number = await self._pr()
            comment = await self.sim.comment(REPO, number, "/converge", user="maint")
            self.commanded[comment.id] = number
            number = await self._pr()
            await self.sim.add_labels(REPO, number, ["converge"], actor="maint")
            self.labeled.append(number)
            self.authored.append(await self._pr(author=AUTO))

    @property
    def numbers(self) -> list[int]:
        return sorted([*self.commanded.values(), *self.labeled, *self.authored])


def _thumbs(sim: Simulator) -> Counter[int]:
    """The 👍 the bot gave, by comment (a command's acknowledgement, an outbox effect)."""
    return Counter(e["comment_id"] for e in sim.effects("reaction") if e.get("content") == "+1")


async def _all_taken(db: Database, intents: Intents) -> bool:
    for number in intents.numbers:
        if await prs.get(db, f"{REPO}#{number}") is None:
            return False
    for comment_id, number in intents.commanded.items():
        rows = [c for c in await commands.for_pr(db, f"{REPO}#{number}") if c.comment_id == comment_id]
        if not rows or rows[0].why == "received":
            return False
    return set(_thumbs(intents.sim)) >= set(intents.commanded)


@pytest.mark.parametrize("redelivery", [True, False], ids=["redelivery+scan", "scan-alone"])
async def test_intent_sent_through_drops_and_downtime_takes_effect_once(redelivery, tmp_path, db_url):
    if db_url.startswith("postgresql"):
        # Each run lasts a 30 s outage; the redelivery and the scan are tested on PostgreSQL
        # on their own (test_redelivery.py, test_lost_webhooks.py).
        pytest.skip("run on SQLite only, for the suite's time")
    sim = Simulator(root=tmp_path / "github")
    async with SimulatorServer(sim) as server:
        await sim.create_repo(REPO, files={"README.md": "# app\n"}, collaborators={"maint": "write"})
        ids = uuid.uuid4().int % 10**8  # githubkit caches App tokens per process by these ids
        port = free_port()
        config = tmp_path / "bot.toml"
        config.write_text(to_toml({
            "database": {"url": db_url},
            "github": {"api_url": server.url, "webhook_secret": WEBHOOK_SECRET, "app_id": str(ids),
                       "private_key_path": str(app_private_key(tmp_path)), "installation_id": ids + 1,
                       "timeout_seconds": 5.0, "read_timeout_seconds": 5.0},
            "server": {"host": "127.0.0.1", "port": port, "shutdown_grace_seconds": 2.0},
            "poller": {"interval_seconds": 5.0, "jitter_seconds": 0.0},
            "scan": {"interval_seconds": 3.0},
            "webhooks": {"redelivery": redelivery, "redelivery_interval_seconds": 3.0},
            "jobs": {"idle_poll_seconds": 0.2},
            "convergence": {"maintainers": ["maint"], "auto_enroll_authors": [AUTO],
                            "reviewers": ["copilot-pull-request-reviewer[bot]"]},
        }))
        bot = BotProcess(config, tmp_path / "bot.log", port, tmp_path / "bot-tmp")
        db = Database(db_url)
        intents = Intents(sim)
        try:
            await bot.start()
            sim.configure_webhooks(f"{bot.url}/webhook", WEBHOOK_SECRET)
            sim.webhook_chaos(7, drop_rate=0.3)
            await intents.send()  # while up, a third of the webhooks lost
            await bot.kill()
            down_until = time.monotonic() + DOWN_SECONDS
            await intents.send()  # while down, every webhook lost
            await sim.settle()
            await asyncio.sleep(max(0.0, down_until - time.monotonic()))  # the outage lasts 30 s
            await bot.start()
            await until("every intent taken", lambda: _all_taken(db, intents), timeout=120, every=0.25)
            sim.webhook_chaos_off()
            await sim.settle()

            # Exactly once: one run per PR, one commands row per comment, accepted, one 👍 each.
            for number in intents.numbers:
                assert len(await runs.runs_for(db, f"{REPO}#{number}")) == 1, number
            for comment_id, number in intents.commanded.items():
                rows = [(c.verb, c.accepted) for c in await commands.for_pr(db, f"{REPO}#{number}")
                        if c.comment_id == comment_id]
                assert rows == [("start", True)], (comment_id, rows)
            assert _thumbs(sim) == Counter(dict.fromkeys(intents.commanded, 1))
            assert sim.duplicate_effects() == []

            lost = [e for e in sim.webhooks.log.entries if e.status_code == 0 and not e.redelivery]
            redelivered = [e for e in sim.webhooks.log.entries if e.redelivery]
            assert len(lost) >= 3 * EACH, "the webhooks of the outage were lost"
            if redelivery:
                assert redelivered, "redelivery asked for what was lost"
            else:
                assert redelivered == [], "with redelivery off, the scan alone found them"
        except BaseException:
            print(bot.tail(60))
            raise
        finally:
            await bot.terminate()
            await db.dispose()
