"""One preset's real CLI run end to end: `convergebot serve` (a process of its own, as the README
runs it) against the simulator, the CLI pointed at the fake model server, in the bot's sandbox.

The bot's home is fresh for every run (the CLI's first start, as on a new machine), outside
/tmp when it can be: a CLI that keeps state under $HOME sees it through the sandbox only where
its preset declares it.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from simulator import Simulator, SimulatorServer, load_scenario

from ..helpers import free_port
from .fakemodel import FakeModel, Plan, serve_in_thread
from .providers import provider

SCENARIO = Path(__file__).with_name("scenario.toml")
REPO = "acme/calc"
KEY = f"{REPO}#1"
SECRET = "agents-webhook-secret"


@dataclass
class Run:
    preset: str
    sim: Simulator
    sim_url: str
    bot_url: str
    model: FakeModel
    workdir: Path
    log_path: Path
    proc: asyncio.subprocess.Process
    started: float

    async def github(self, path: str) -> Any:
        async with httpx.AsyncClient(base_url=self.sim_url, timeout=10) as http:
            r = await http.get(path.lstrip("/"), headers={"Authorization": "token t"})
            r.raise_for_status()
            return r.json()

    async def detail(self) -> dict:
        owner, _, rest = KEY.partition("/")
        repo, _, number = rest.partition("#")
        async with httpx.AsyncClient(base_url=self.bot_url, timeout=10) as http:
            r = await http.get(f"/api/prs/{owner}/{repo}/{number}")
            return r.json() if r.status_code == 200 else {}

    async def metrics(self) -> str:
        async with httpx.AsyncClient(base_url=self.bot_url, timeout=10) as http:
            return (await http.get("/metrics")).text

    async def merged(self) -> bool:
        async with httpx.AsyncClient(base_url=self.sim_url, timeout=10) as http:
            r = await http.get(f"repos/{REPO}/pulls/1/merge", headers={"Authorization": "token t"})
            return r.status_code == 204

    def log(self, tail: int = 6000) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return text[-tail:]

    async def until(self, what: str, check, timeout: float) -> Any:
        """Wait for `check()` to hold, up to `timeout` seconds; the serve log's tail on failure."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.returncode is not None:
                raise AssertionError(f"serve exited ({self.proc.returncode}) waiting for {what}:\n{self.log()}")
            try:
                got = await check()
            except httpx.TransportError:
                got = None  # serve is not listening yet
            if got:
                return got
            await asyncio.sleep(0.5)
        raise AssertionError(f"no {what} within {timeout:g} s; model steps {self.model.steps()}:\n{self.log()}")


def bot_home(base: Path) -> Path:
    """A fresh home for the bot's user: under the cache's sibling when root (outside /tmp, as a
    real home is), else inside `base`."""
    home = Path(tempfile.mkdtemp(prefix="home-", dir=base))
    home.chmod(0o700)
    return home


@asynccontextmanager
async def running(preset: str, program: Path, tmp_path: Path, plan: Plan, *,
                  fixer: dict | None = None, scenario: Path = SCENARIO) -> AsyncIterator[Run]:
    model = FakeModel(plan, log_path=tmp_path / "model.jsonl")
    model_url, stop_model = serve_in_thread(model)
    port = free_port()
    sim = Simulator(root=tmp_path / "github", webhook_url=f"http://127.0.0.1:{port}/webhook",
                    webhook_secret=SECRET)
    home = bot_home(tmp_path)
    env_add, args = provider(preset, model_url, home)
    settings = {"kind": "command", "preset": preset, "command": [str(program)], "preset_args": args,
                "sandbox": "bwrap", "timeout_seconds": 600, **(fixer or {})}
    try:
        async with SimulatorServer(sim, load_scenario(scenario)) as server:
            config = tmp_path / "convergebot.toml"
            config.write_text(_toml({
                "database": {"url": f"sqlite:///{tmp_path / 'bot.db'}"},
                "github": {"api_url": server.url, "token": "agents-token", "webhook_secret": SECRET},
                "server": {"port": port},
                "scan": {"repositories": [REPO]},
                "poller": {"interval_seconds": 5},
                "fixer": settings,
            }))
            env = {k: v for k, v in os.environ.items()
                   if not k.startswith(("CONVERGEBOT_", "ANTHROPIC_", "OPENAI_", "GEMINI_", "GOOGLE_",
                                        "COPILOT_", "CODEX_"))}
            env |= {"HOME": str(home), **env_add}
            env.pop("XDG_CACHE_HOME", None)
            env.pop("XDG_CONFIG_HOME", None)
            log_path = tmp_path / "serve.log"
            with open(log_path, "wb") as log_file:
                proc = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "bot", "serve", "--config", str(config), cwd=tmp_path, env=env,
                    stdout=asyncio.subprocess.DEVNULL, stderr=log_file)
            run = Run(preset, sim, server.url, f"http://127.0.0.1:{port}", model, tmp_path, log_path,
                      proc, time.monotonic())
            try:
                yield run
            finally:
                if proc.returncode is None:
                    proc.terminate()
                    try:
                        await asyncio.wait_for(proc.wait(), 30)
                    except TimeoutError:
                        proc.kill()
                        await proc.wait()
    finally:
        stop_model()
        shutil.rmtree(home, ignore_errors=True)


def _toml(data: dict) -> str:
    """Plain TOML for a config of tables of scalars and lists (json's strings are TOML's)."""
    out = []
    for table, values in data.items():
        out.append(f"[{table}]")
        out += [f"{k} = {json.dumps(v)}" for k, v in values.items()]
        out.append("")
    return "\n".join(out)


def report(row: dict) -> None:
    """A line of `make agents`'s per-preset report, when it asked for one."""
    path = os.environ.get("CONVERGEBOT_AGENTS_REPORT")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
