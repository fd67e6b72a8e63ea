"""The README's walkthrough, as written: `convergebot serve --config examples/simulator/convergebot.toml`
against the simulator on the demo scenario, with the stand-in agent as the `command` fixer,
merges the scenario's three PRs. Only the ports and the database file differ (free ones, in a
temporary directory)."""

from __future__ import annotations

import asyncio
import base64
import os
import shutil
import socket
import sys
import time
from pathlib import Path

import httpx
import pytest

from simulator import DEMO_SCENARIO, Simulator, SimulatorServer, load_scenario

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "simulator"

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _merged(api: str) -> set[int]:
    async with httpx.AsyncClient(base_url=api, timeout=5) as http:
        return {n for n in (1, 2, 3)
                if (await http.get(f"repos/acme/widgets/pulls/{n}/merge")).status_code == 204}


async def test_serve_against_the_simulator_with_the_stand_in_agent_merges_the_demo_prs(tmp_path):
    # The example's relative paths (the agent, the database) resolve from where serve runs.
    shutil.copytree(EXAMPLE, tmp_path / "examples" / "simulator")
    port = _free_port()
    sim = Simulator(root=tmp_path / "github", webhook_url=f"http://127.0.0.1:{port}/webhook",
                    webhook_secret="s3cret")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVERGEBOT_")}
    async with SimulatorServer(sim, load_scenario(DEMO_SCENARIO)) as server:
        env |= {"CONVERGEBOT_GITHUB_API_URL": server.url, "CONVERGEBOT_SERVER_PORT": str(port)}
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot", "serve", "--config", "examples/simulator/convergebot.toml",
            cwd=tmp_path, env=env, stdout=asyncio.subprocess.DEVNULL,
            stderr=open(tmp_path / "serve.log", "wb"))
        try:
            deadline = time.monotonic() + 90
            merged: set[int] = set()
            while time.monotonic() < deadline and proc.returncode is None:
                merged = await _merged(server.url)
                if merged == {1, 2, 3}:
                    break
                await asyncio.sleep(0.5)
            log = (tmp_path / "serve.log").read_text()
            assert merged == {1, 2, 3}, log[-3000:]
            # The stand-in agent's work was pushed, reviewed and merged: its notes are on main.
            async with httpx.AsyncClient(base_url=server.url, timeout=5) as http:
                notes = await http.get("repos/acme/widgets/contents/NOTES.md", params={"ref": "main"})
            assert notes.status_code == 200
            assert "ZeroDivisionError" in base64.b64decode(notes.json()["content"]).decode()
        finally:
            if proc.returncode is None:
                proc.terminate()
                await asyncio.wait_for(proc.wait(), 30)
    assert (tmp_path / "convergebot-walkthrough.db").exists()
