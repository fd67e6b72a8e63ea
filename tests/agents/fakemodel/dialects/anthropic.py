"""The Anthropic Messages API, as Claude Code uses it.

Claude Code 2.1.332 posts every model call to `POST /v1/messages?beta=true`, streamed
(`"stream": true`, server-sent events). The main conversation offers its tools (`Read`, `Edit`,
`Bash`, ...); a call that offers no `Edit` (a side call: a title, a topic) gets the plan's final
text. The first answer calls `Edit` with an absolute `file_path`: the working directory is named
in a `system`-role message of `messages` ("Primary working directory: ..."). The edit counts as
made once the conversation holds a `tool_result` for our `Edit`, an error result too (the
failed-edit case: "String to replace not found in file"). Claude Code 2.1.332 accepts an `Edit`
of a file in its working directory without a `Read` first; should it refuse one ("File has not
been read yet"), the model calls `Read`, then `Edit` again.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ..server import plain_text

DIALECT = "anthropic"
EDIT_TOOL = "Edit"
READ_TOOL = "Read"
NOT_READ = "has not been read yet"  # Edit's refusal of a file not Read first
DEFAULT_MODEL = "claude-sonnet-4-5"
_WORKDIR = re.compile(r"(?:[Pp]rimary )?[Ww]orking directory: *(/[^\n<]*?) *(?:\n|<|$)")


def routes(model) -> list[Route]:
    async def messages(request: Request) -> Response:
        body = await request.json()
        answer, step = _answer(model, body)
        model.record(DIALECT, request, step, body)
        return _render(answer, body, model.plan)

    async def count_tokens(request: Request) -> Response:
        # Not seen from 2.1.332 in print mode; answered in case another version asks.
        body = await request.json()
        model.record(DIALECT, request, "side", body)
        return JSONResponse({"input_tokens": model.plan.input_tokens})

    async def hello(request: Request) -> Response:
        # A connectivity probe (`HEAD /api/hello`) sent without
        # CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC; not a model call, so not recorded.
        return Response(status_code=200)

    return [
        Route("/v1/messages", messages, methods=["POST"]),
        Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
        Route("/api/hello", hello, methods=["GET", "HEAD"]),
    ]


# The answer: a list of content blocks, and the step it is ("read", "edit", "final", "side").

def _answer(model, body: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
    tools = {tool.get("name") for tool in body.get("tools") or () if isinstance(tool, dict)}
    if EDIT_TOOL not in tools:
        return [_text(model.plan.final)], "side"
    messages = body.get("messages") or []
    calls = _tool_calls(messages)
    results = _tool_results(messages)
    edits = [text for i, text in results.items() if calls.get(i) == EDIT_TOOL]
    refused = [text for text in edits if NOT_READ in text]
    read = any(calls.get(i) == READ_TOOL for i in results)
    # Made (or failed) unless every Edit was refused as unread and the Read is still to come.
    edited = bool(edits) and (len(refused) < len(edits) or read and len(edits) > 1)
    step = model.next_step(edited=edited)
    if step.edit is None:
        return [_text(step.text)], "final"
    path = _absolute(step.edit.path, body)
    if refused and not read and READ_TOOL in tools:
        return [_tool_use(READ_TOOL, {"file_path": path})], "read"
    return [_tool_use(EDIT_TOOL, {"file_path": path, "old_string": step.edit.old,
                                  "new_string": step.edit.new, "replace_all": False})], "edit"


def _tool_calls(messages: list[Any]) -> dict[str, str]:
    """Each tool_use id in the assistant's turns, with its tool's name."""
    return {block.get("id"): block.get("name")
            for message in messages if message.get("role") == "assistant"
            for block in _blocks(message) if block.get("type") == "tool_use"}


def _tool_results(messages: list[Any]) -> dict[str, str]:
    """Each tool_result in the user's turns: its tool_use id, with its text."""
    return {block.get("tool_use_id"): plain_text(block.get("content"))
            for message in messages if message.get("role") == "user"
            for block in _blocks(message) if block.get("type") == "tool_result"}


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _absolute(path: str, body: dict[str, Any]) -> str:
    if path.startswith("/"):
        return path
    workdir = _workdir(body)
    if workdir is None:
        raise ValueError("anthropic dialect: no working directory in the request's system prompt")
    return f"{workdir.rstrip('/')}/{path}"


def _workdir(body: dict[str, Any]) -> str | None:
    """The working directory the system prompt names: in a `system`-role message (2.1.332),
    or in the `system` field or a user message's reminder (other versions)."""
    texts = [plain_text(body.get("system"))]
    texts += [plain_text(m.get("content")) for m in body.get("messages") or () if isinstance(m, dict)]
    for text in texts:
        found = _WORKDIR.search(text)
        if found:
            return found.group(1)
    return None



def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _tool_use(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:24]}", "name": name,
            "input": arguments}


# The wire format.

def _render(content: list[dict[str, Any]], body: dict[str, Any], plan) -> Response:
    stop = "tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn"
    usage = {"input_tokens": plan.input_tokens, "cache_creation_input_tokens": 0,
             "cache_read_input_tokens": 0, "output_tokens": plan.output_tokens}
    message = {"id": f"msg_{uuid.uuid4().hex[:24]}", "type": "message", "role": "assistant",
               "model": plan.model or body.get("model") or DEFAULT_MODEL, "content": content,
               "stop_reason": stop, "stop_sequence": None, "usage": usage}
    headers = {"request-id": f"req_{uuid.uuid4().hex[:24]}"}
    if not body.get("stream"):
        return JSONResponse(message, headers=headers)
    return StreamingResponse(_events(message), media_type="text/event-stream",
                             headers={**headers, "cache-control": "no-cache"})


def _events(message: dict[str, Any]) -> Iterator[str]:
    """The events the API streams for `message`: its start (no content, output tokens so far),
    each block's start, deltas and stop, the stop reason with the final usage, and the end."""
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None,
             "usage": {**usage, "output_tokens": 1}}
    yield _event("message_start", {"type": "message_start", "message": start})
    yield _event("ping", {"type": "ping"})
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            opening, deltas = {"type": "text", "text": ""}, [
                {"type": "text_delta", "text": piece} for piece in _pieces(block["text"])]
        else:
            opening = {**block, "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": piece}
                      for piece in _pieces(json.dumps(block["input"]))]
        yield _event("content_block_start",
                     {"type": "content_block_start", "index": index, "content_block": opening})
        for delta in deltas:
            yield _event("content_block_delta",
                         {"type": "content_block_delta", "index": index, "delta": delta})
        yield _event("content_block_stop", {"type": "content_block_stop", "index": index})
    yield _event("message_delta", {
        "type": "message_delta",
        "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
        "usage": usage})
    yield _event("message_stop", {"type": "message_stop"})


def _pieces(text: str, size: int = 40) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


def _event(name: str, data: dict[str, Any]) -> str:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n"
