"""A fake model server: one scripted exchange, answered in each CLI's own API.

Each real agent CLI (Claude Code, codex, Gemini CLI, Copilot CLI, aider) is pointed at this
server on 127.0.0.1 instead of its vendor's API. The script (`Plan`) is the same for every
dialect: the model's first answer edits one file through the CLI's own edit tool (aider: a
SEARCH/REPLACE block in its text), and once the CLI has sent back the tool's result, the model
answers with its final message. Every answer reports `usage`, so the CLIs count tokens (and
Claude Code a cost).

A dialect (tests/agents/fakemodel/dialects/) turns a request into `Step`s: it finds in the
request whether the edit was already made (a tool result in the conversation) and where the
CLI runs (the working directory its system prompt names), and renders the answer in its wire
format, streamed where the CLI asks for a stream. Side requests a CLI makes (a title, a
"next speaker" check, a quota probe) get the dialect's plain answer.

Run alone: `python -m tests.agents.fakemodel --port 8765 --plan plan.json --log requests.jsonl`.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


@dataclass(frozen=True)
class Edit:
    """Replace `old` by `new` in `path` (relative to the CLI's working directory). An `old`
    that is not in the file makes the CLI's edit tool fail, as a model's bad edit does."""

    path: str
    old: str
    new: str


@dataclass(frozen=True)
class Plan:
    edit: Edit | None
    final: str = "Done: the finding is fixed."
    # Reported on every answer; Claude Code prices them by the model's list price.
    input_tokens: int = 1200
    output_tokens: int = 80
    # The model's name the CLIs are told to use (some check it against a list).
    model: str = ""

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Plan:
        edit = data.get("edit")
        return cls(**{**data, "edit": Edit(**edit) if edit else None})


@dataclass(frozen=True)
class Step:
    """What the model says next: a call of the edit tool (`edit` set) or its final text."""

    edit: Edit | None = None
    text: str = ""


@dataclass
class Exchange:
    dialect: str
    path: str
    step: str  # "edit", "final" or "side"
    body: Any
    at: float = field(default_factory=time.time)


class FakeModel:
    def __init__(self, plan: Plan, log_path: Path | None = None) -> None:
        self.plan = plan
        self.exchanges: list[Exchange] = []
        self.log_path = log_path
        self._lock = threading.Lock()
        routes: list[Route] = [Route("/_fake/exchanges", self._exchanges)]
        for info in pkgutil.iter_modules([str(Path(__file__).parent / "dialects")]):
            module = importlib.import_module(f"{__package__}.dialects.{info.name}")
            if hasattr(module, "routes"):
                routes += module.routes(self)
        self.app = Starlette(routes=routes)

    def next_step(self, *, edited: bool) -> Step:
        """The script: edit first (when there is an edit), then the final message."""
        if self.plan.edit is not None and not edited:
            return Step(edit=self.plan.edit)
        return Step(text=self.plan.final)

    def record(self, dialect: str, request: Request, step: str, body: Any) -> None:
        exchange = Exchange(dialect, request.url.path, step, body)
        with self._lock:
            self.exchanges.append(exchange)
            if self.log_path is not None:
                with open(self.log_path, "a", encoding="utf-8") as f:
                    f.write(json.dumps(asdict(exchange), default=str) + "\n")

    def steps(self, dialect: str | None = None) -> list[str]:
        return [e.step for e in self.exchanges if dialect is None or e.dialect == dialect]

    async def _exchanges(self, request: Request) -> JSONResponse:
        return JSONResponse([{"dialect": e.dialect, "path": e.path, "step": e.step}
                             for e in self.exchanges])


def plain_text(content: Any) -> str:
    """A message's content as text: a string, or the `text` of each part of a list of parts
    (the shape both the Anthropic and the OpenAI Chat messages use)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


class _Server(threading.Thread):
    def __init__(self, model: FakeModel, port: int) -> None:
        super().__init__(daemon=True)
        import uvicorn

        self.server = uvicorn.Server(uvicorn.Config(model.app, host="127.0.0.1", port=port,
                                                    log_level="warning", lifespan="off"))

    def run(self) -> None:
        self.server.run()


def serve_in_thread(model: FakeModel, port: int = 0, timeout: float = 10.0):
    """Start `model` on 127.0.0.1 in a daemon thread; returns (base URL, stop function)."""
    thread = _Server(model, port)
    thread.start()
    deadline = time.monotonic() + timeout
    while not thread.server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the fake model server did not start")
        time.sleep(0.01)
    bound = thread.server.servers[0].sockets[0].getsockname()[1]

    def stop() -> None:
        thread.server.should_exit = True
        thread.join(10)

    return f"http://127.0.0.1:{bound}", stop
