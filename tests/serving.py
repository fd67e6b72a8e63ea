"""Run the real `serve` stack in-process on a free port, against a given database and GitHub URL."""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import Any

import httpx

from bot.config import Config
from bot.surfaces.serve import running

WEBHOOK_SECRET = "test-webhook-secret"
# A step's check-run update waits a second here (`[github] check_run_settle_seconds`, 5 by
# default): the tests wait out every settle window before they look.
CHECK_RUN_SETTLE_SECONDS = 1.0


def make_config(db_url: str, api_url: str = "http://127.0.0.1:9/", **sections: dict[str, Any]) -> Config:
    data: dict[str, Any] = {
        "database": {"url": db_url},
        "github": {"api_url": api_url, "token": "test-token", "webhook_secret": WEBHOOK_SECRET,
                   "timeout_seconds": 5, "read_timeout_seconds": 5,
                   "check_run_settle_seconds": CHECK_RUN_SETTLE_SECONDS},
        "server": {"port": 0, "api_token": "api-token", "shutdown_grace_seconds": 2},
        # Ticks are driven by hand, back to back: each re-reads every active PR unless a test
        # turns on leaving out the PRs a step just read.
        "poller": {"interval_seconds": 3600, "jitter_seconds": 0, "fresh_read_seconds": 0},
        "jobs": {"workers": 2, "idle_poll_seconds": 0.05, "backoff_base_seconds": 0.2,
                 "backoff_cap_seconds": 1},
    }
    for name, values in sections.items():
        data.setdefault(name, {}).update(values)
    return Config.model_validate(data)


@asynccontextmanager
async def serving(config: Config, *, fixer=None):
    """Yields (runtime, http client on the server's base URL)."""
    async with running(config, fixer=fixer) as (rt, server):
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}", timeout=10) as http:
            yield rt, http
