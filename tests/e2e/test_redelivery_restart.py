"""A `/converge` comment and the enroll label sent while the bot was killed take effect once it
is back: its first redelivery pass, at start-up, asks GitHub for them again.

The real `convergebot serve` as a child process (SIGKILLed, then started again) against the
real simulator; what happened is read from the bot's database and the simulator's delivery log.
"""

from __future__ import annotations

import uuid

from simulator import Simulator, SimulatorServer
from storage import commands, prs, runs
from storage.database import Database

from ..chaos.bot_process import BotProcess, free_port, to_toml
from ..helpers import app_private_key, until
from ..serving import WEBHOOK_SECRET

REPO = "acme/app"


async def _settled(db, pr_key: str) -> bool:
    """Its command was handled (a row marked `received` is one under way)."""
    rows = await commands.for_pr(db, pr_key)
    return bool(rows) and all(c.why != "received" for c in rows)


async def test_what_was_sent_while_the_bot_was_down_takes_effect_once_after_its_restart(tmp_path, db_url):
    pem = app_private_key(tmp_path)
    sim = Simulator(root=tmp_path / "github")
    async with SimulatorServer(sim) as server:
        await sim.create_repo(REPO, files={"README.md": "# app\n"}, collaborators={"maint": "write"})
        port = free_port()
        ids = uuid.uuid4().int % 10**8
        config = tmp_path / "bot.toml"
        config.write_text(to_toml({
            "database": {"url": db_url},
            "github": {"api_url": server.url, "webhook_secret": WEBHOOK_SECRET, "app_id": str(ids),
                       "private_key_path": str(pem), "installation_id": ids + 1,
                       "timeout_seconds": 5.0, "read_timeout_seconds": 5.0},
            "server": {"host": "127.0.0.1", "port": port, "shutdown_grace_seconds": 2.0},
            "poller": {"interval_seconds": 3600.0, "jitter_seconds": 0.0},
            "scan": {"enabled": False},  # the delivery log alone brings them back here
            "webhooks": {"redelivery_interval_seconds": 3600.0},
            "jobs": {"idle_poll_seconds": 0.2},
            "convergence": {"maintainers": ["maint"]},
        }))
        bot = BotProcess(config, tmp_path / "bot.log", port, tmp_path / "bot-tmp")
        db = Database(db_url)
        try:
            await bot.start()
            sim.configure_webhooks(f"{bot.url}/webhook", WEBHOOK_SECRET)
            command_pr = await sim.open_pr(REPO, title="One", head="one", author="dev",
                                           files={"a.py": "A = 1\n"})
            label_pr = await sim.open_pr(REPO, title="Two", head="two", author="dev",
                                         files={"b.py": "B = 1\n"})
            await sim.settle()
            assert {e.status_code for e in sim.webhooks.log.entries} == {202}

            await bot.kill()
            comment = await sim.comment(REPO, command_pr.number, "/converge", user="maint")
            await sim.add_labels(REPO, label_pr.number, ["converge"], actor="maint")
            await sim.settle()
            lost = [e for e in sim.webhooks.log.entries if e.status_code == 0]
            assert [(e.event, e.action) for e in lost] == [("issue_comment", "created"),
                                                          ("pull_request", "labeled")]

            await bot.start()  # its first pass runs at start-up
            command_key, label_key = (f"{REPO}#{n}" for n in (command_pr.number, label_pr.number))
            for k in (command_key, label_key):
                await until(f"{k} enrolled", lambda k=k: prs.get(db, k), timeout=60, every=0.1)
            await until("the command settled", lambda: _settled(db, command_key), every=0.1)
            await sim.settle()
            assert [(c.comment_id, c.verb, c.accepted) for c in await commands.for_pr(db, command_key)] \
                == [(comment.id, "start", True)]
            for k in (command_key, label_key):
                assert len(await runs.runs_for(db, k)) == 1
            redelivered = [(e.guid, e.status_code) for e in sim.webhooks.log.entries if e.redelivery]
            assert sorted(redelivered) == sorted((e.guid, 202) for e in lost)
        except BaseException:
            print(bot.tail(80))
            raise
        finally:
            await bot.terminate()
            await db.dispose()
