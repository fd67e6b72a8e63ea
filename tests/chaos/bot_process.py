"""The real `convergebot serve` as a child process: start, SIGKILL, restart, SIGTERM, metrics."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import sys
import time
from collections import deque
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]


def utc_now() -> str:
    """As the bot's log lines stamp themselves (ISO, UTC), to read the two side by side."""
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def to_toml(config: dict[str, dict[str, Any]]) -> str:
    """Sections of str, int, float, bool and lists of str (JSON strings are valid TOML ones)."""
    lines = []
    for section, values in config.items():
        lines.append(f"[{section}]")
        for key, value in values.items():
            if isinstance(value, bool):
                text = "true" if value else "false"
            elif isinstance(value, int | float):
                text = repr(value)
            else:
                text = json.dumps(value)
            lines.append(f"{key} = {text}")
        lines.append("")
    return "\n".join(lines)


class BotProcess:
    """One `python -m bot --config FILE serve` at a time, on a fixed port, logging to one file."""

    def __init__(self, config_path: Path, log_path: Path, port: int, tmp: Path, *, code: Path = ROOT) -> None:
        self.config_path = config_path
        self.code = code  # the tree whose `bot` runs: this one, or another release's worktree
        self.log_path = log_path
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.proc: asyncio.subprocess.Process | None = None
        self.starts = 0
        # The bot's own settings come from the file only; its leftover workspaces stay in tmp.
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("CONVERGEBOT_")}
        self.env["TMPDIR"] = str(tmp)
        tmp.mkdir(parents=True, exist_ok=True)

    def note(self, text: str) -> None:
        with self.log_path.open("a") as log:
            log.write(json.dumps({"harness": text, "timestamp": utc_now()}) + "\n")

    async def start(self, timeout: float = 60.0) -> None:
        self.starts += 1
        self.note(f"start #{self.starts}")
        with self.log_path.open("ab") as log:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "bot", "--config", str(self.config_path), "serve",
                cwd=self.code, env=self.env, stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log)
        await self._wait_ready(timeout)

    async def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient(timeout=2) as http:
            while time.monotonic() < deadline:
                if self.exited is not None:
                    raise RuntimeError(f"the bot exited with {self.exited} during start-up")
                try:
                    if (await http.get(f"{self.url}/livez")).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.1)
        raise RuntimeError(f"the bot did not answer /livez within {timeout:.0f}s")

    @property
    def exited(self) -> int | None:
        return None if self.proc is None else self.proc.returncode

    async def kill(self) -> None:
        assert self.proc is not None
        self.note(f"SIGKILL pid {self.proc.pid}")
        self.proc.send_signal(signal.SIGKILL)
        await self.proc.wait()

    async def terminate(self, timeout: float = 20.0) -> int | None:
        """SIGTERM; the exit code, or None if it had to be killed after `timeout`."""
        if self.proc is None or self.proc.returncode is not None:
            return None if self.proc is None else self.proc.returncode
        self.note(f"SIGTERM pid {self.proc.pid}")
        self.proc.send_signal(signal.SIGTERM)
        try:
            return await asyncio.wait_for(self.proc.wait(), timeout)
        except TimeoutError:
            self.note("still running after SIGTERM: SIGKILL")
            self.proc.send_signal(signal.SIGKILL)
            await self.proc.wait()
            return None

    async def backup(self, dest: Path, timeout: float = 60.0) -> str:
        """`convergebot backup DEST` with the bot's config, while it serves; its one line."""
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot", "--config", str(self.config_path), "backup", str(dest),
            cwd=ROOT, env=self.env, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
        self.note(f"backup to {dest}: exit {proc.returncode}: {out.decode().strip()} {err.decode().strip()}")
        if proc.returncode != 0:
            raise RuntimeError(f"convergebot backup exited {proc.returncode}: {err.decode().strip()}")
        return out.decode().strip()

    async def metric(self, name: str) -> tuple[bool, float] | None:
        """(present, sum of its samples) from /metrics; None when /metrics does not answer."""
        try:
            async with httpx.AsyncClient(timeout=2) as http:
                text = (await http.get(f"{self.url}/metrics")).text
        except httpx.HTTPError:
            return None
        pattern = re.compile(rf"^{re.escape(name)}(?:\{{[^}}]*\}})? ([0-9.eE+-]+)$", re.MULTILINE)
        values = [float(v) for v in pattern.findall(text)]
        return bool(values), sum(values)

    def tail(self, lines: int = 50) -> str:
        try:
            with self.log_path.open(errors="replace") as log:
                return "".join(deque(log, maxlen=lines))
        except OSError as e:
            return f"(no log: {e})"
