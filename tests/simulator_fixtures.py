"""Shared fixtures and helpers for tests that talk to the GitHub simulator over real HTTP.

Use them from any test module with::

    from tests.simulator_fixtures import simulator, sim, webhook_receiver  # noqa: F401

`simulator` is a started SimulatorServer (its `.url` is the GitHub base URL, `.sim` the state),
`webhook_receiver` a real HTTP server that records and verifies signed deliveries.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from githubkit.webhooks import verify
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from simulator import AsgiServer, Scenario, Simulator, SimulatorServer

WEBHOOK_SECRET = "sim-test-secret"


async def start_simulator(root: Path, scenario: Scenario | None = None,
                          **options) -> SimulatorServer:
    """A started simulator on a free port with its git repositories under `root`."""
    server = SimulatorServer(Simulator(root=root, **options), scenario)
    await server.start()
    return server


@pytest.fixture
async def simulator(tmp_path) -> AsyncIterator[SimulatorServer]:
    server = await start_simulator(tmp_path / "github")
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def api(simulator: SimulatorServer) -> AsyncIterator[httpx.AsyncClient]:
    """A plain HTTP client on the simulator's base URL."""
    async with httpx.AsyncClient(base_url=simulator.url, timeout=10) as client:
        yield client


@pytest.fixture
def sim(simulator: SimulatorServer) -> Simulator:
    return simulator.sim


@dataclass
class Received:
    event: str
    delivery: str
    signature: str | None
    body: bytes
    headers: dict[str, str]
    valid: bool  # signature verified against WEBHOOK_SECRET

    @property
    def payload(self) -> dict:
        return json.loads(self.body)

    @property
    def action(self) -> str | None:
        return self.payload.get("action")


class WebhookReceiver:
    """Records every POST; `status` is what it answers (tests can make it fail)."""

    def __init__(self, secret: str = WEBHOOK_SECRET) -> None:
        self.secret = secret
        self.received: list[Received] = []
        self.status = 202
        self._arrived = asyncio.Condition()
        self._server = AsgiServer(Starlette(routes=[Route("/webhook", self._hook,
                                                          methods=["POST"])]))

    @property
    def url(self) -> str:
        return f"{self._server.url}webhook"

    async def _hook(self, request: Request) -> Response:
        body = await request.body()
        signature = request.headers.get("x-hub-signature-256")
        self.received.append(Received(
            event=request.headers.get("x-github-event", ""),
            delivery=request.headers.get("x-github-delivery", ""), signature=signature,
            body=body, headers=dict(request.headers),
            valid=bool(signature) and verify(self.secret, body, signature)))
        async with self._arrived:
            self._arrived.notify_all()
        return Response(status_code=self.status)

    def events(self, event: str | None = None, action: str | None = None) -> list[Received]:
        return [r for r in self.received
                if (event is None or r.event == event) and (action is None or r.action == action)]

    async def wait_for(self, event: str, action: str | None = None, count: int = 1,
                       timeout: float = 10.0) -> list[Received]:
        async with asyncio.timeout(timeout), self._arrived:
            await self._arrived.wait_for(lambda: len(self.events(event, action)) >= count)
        return self.events(event, action)

    async def start(self) -> None:
        await self._server.start()

    async def stop(self) -> None:
        await self._server.stop()


@pytest.fixture
async def webhook_receiver() -> AsyncIterator[WebhookReceiver]:
    receiver = WebhookReceiver()
    await receiver.start()
    try:
        yield receiver
    finally:
        await receiver.stop()


GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "Fixer",
    "GIT_AUTHOR_EMAIL": "fixer@example.invalid",
    "GIT_COMMITTER_NAME": "Fixer",
    "GIT_COMMITTER_EMAIL": "fixer@example.invalid",
}


async def git(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
              timeout: float = 30.0) -> str:
    """Run real git without blocking the loop: a push waits on the simulator's hook endpoint,
    which this same event loop serves."""
    proc = await asyncio.create_subprocess_exec(
        "git", *args, cwd=cwd, env={**os.environ, **GIT_ENV, **(env or {})},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    if proc.returncode:
        raise RuntimeError(f"git {' '.join(args)} failed: {err.decode()}")
    return out.decode()
