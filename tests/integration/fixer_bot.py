"""A stand-in for the bot process in the sandbox tests.

`python -m tests.integration.fixer_bot CLONE_URL BRANCH ENTRY_HEAD`, run in the bot's directory
with the bot's environment: it writes its pid to ./bot.pid, loads the config as `serve` does
(./convergebot.toml, then the environment), builds the fixer `serve` would, runs it once on the
branch and prints the verdict as JSON. The agent's parent is then a process that holds the
bot's secrets, as in production.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from dataclasses import asdict
from pathlib import Path

from bot.config import load_config
from bot.fixers.base import FixRequest
from bot.logs import configure_logging
from bot.surfaces.serve import build_fixer


async def main(clone_url: str, branch: str, entry_head: str) -> int:
    Path("bot.pid").write_text(str(os.getpid()))
    config = load_config()
    configure_logging("info", "json")
    fixer = build_fixer(config)
    verdict = await fixer.run(FixRequest(
        pr_key="acme/widgets#7", round_no=1, attempt=0, title="t", description="d",
        head_branch=branch, entry_head=entry_head, clone_url=clone_url,
        token=config.github.token.get_secret_value() or None, findings=(), instructions=(),
    ))
    print(json.dumps(asdict(verdict)))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(*sys.argv[1:])))
