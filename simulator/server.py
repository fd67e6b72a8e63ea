"""Serving a Simulator over real HTTP with uvicorn, inside the caller's event loop."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import structlog
import uvicorn
from starlette.types import ASGIApp

from sharedio.children import children_watched_by_pidfd

from .app import build_app
from .scenario import Scenario, apply_scenario, load_scenario
from .simulator import Simulator

log = structlog.get_logger("simulator.server")


class _EmbeddedServer(uvicorn.Server):
    """uvicorn would install (and re-raise) its own signal handlers; the host process owns them."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class AsgiServer:
    """Any ASGI app on a real socket in the current event loop (port 0 picks a free port)."""

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0) -> None:
        self.app = app
        self.host = host
        self.port = port
        self.url = ""
        self._server: _EmbeddedServer | None = None
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        config = uvicorn.Config(self.app, host=self.host, port=self.port, log_config=None,
                                lifespan="off", access_log=False, timeout_graceful_shutdown=2)
        self._server = _EmbeddedServer(config)
        self._task = asyncio.get_running_loop().create_task(self._server.serve(),
                                                            name="asgi-server")
        while not self._server.started:
            if self._task.done():  # uvicorn exits (SystemExit) when it cannot bind
                error = None if self._task.cancelled() else self._task.exception()
                raise RuntimeError(f"cannot listen on {self.host}:{self.port}: {error!r}")
            await asyncio.sleep(0.01)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://{self.host}:{self.port}/"

    async def stop(self) -> None:
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            with contextlib.suppress(BaseException):
                await self._task
            self._server = self._task = None


class SimulatorServer:
    """`await start()` returns once listening; `.url` is the GitHub REST base URL
    (`http://127.0.0.1:PORT/`), GraphQL is at `{url}graphql`.

    `scenario`: its repositories and PRs are created on the first start. `app`: what to serve
    instead of `build_app(sim)` (a test's wrapper around it)."""

    def __init__(self, sim: Simulator, scenario: Scenario | None = None, *,
                 app: ASGIApp | None = None, host: str = "127.0.0.1", port: int = 0) -> None:
        self.sim = sim
        self._scenario = scenario
        self._http = AsgiServer(build_app(sim) if app is None else app, host, port)

    @property
    def port(self) -> int:
        return self._http.port

    @property
    def url(self) -> str:
        return self._http.url

    async def start(self) -> None:
        await self._http.start()
        self.sim.base_url = self.url
        self.sim.git.set_hook_url(self.sim.hook_endpoint)
        # The scenario is applied after binding, so every URL it renders carries the real port;
        # and once: a server started again serves the repositories it already made.
        scenario, self._scenario = self._scenario, None
        if scenario is not None:
            await apply_scenario(self.sim, scenario)
        log.info("simulator listening", url=self.url, root=str(self.sim.root))

    async def stop(self) -> None:
        self.sim.closing.set()  # releases requests held open by `drop` faults
        await self._http.stop()
        self.sim.git.set_hook_url(None)
        await self.sim.aclose()

    async def __aenter__(self) -> SimulatorServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


async def run_simulator(port: int, scenario_path: Path | None = None,
                        webhook_url: str | None = None, webhook_secret: str | None = None, *,
                        host: str = "127.0.0.1", root: Path | None = None) -> None:
    """`convergebot simulator`: serve until cancelled, SIGINT or SIGTERM.

    Git repositories go under `root` (default: a temporary directory removed on exit).
    """
    scenario = load_scenario(scenario_path) if scenario_path else None
    with contextlib.ExitStack() as stack:
        # Its git processes' ends read from a pidfd, not a thread each (as `serve` does).
        stack.enter_context(children_watched_by_pidfd())
        if root is None:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="convergebot-sim-")))
        sim = Simulator(root=root, webhook_url=webhook_url, webhook_secret=webhook_secret)
        server = SimulatorServer(sim, scenario, host=host, port=port)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
        await server.start()
        try:
            await stop.wait()
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.remove_signal_handler(sig)
            await server.stop()
