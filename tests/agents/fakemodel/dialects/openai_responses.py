"""The OpenAI Responses API as the Codex CLI (`codex exec`) uses it: `POST /v1/responses`.

Codex (0.171.0) sends the whole conversation in every request (`store: false`), always asks
for a stream (`stream: true`, `Accept: text/event-stream`) and reads the answer from the
server-sent events the real API sends: `response.created`, `response.in_progress`,
`response.output_item.added`, the item's deltas, `response.output_item.done` and
`response.completed`, whose `response.usage` carries the token counts it reports.

The edit goes through codex's own patch tool. With a model whose metadata codex knows (e.g.
`-m gpt-5.5`) the request lists `apply_patch` as a custom (freeform) tool, answered by a
`custom_tool_call` whose `input` is the patch; an unknown model name gets fallback metadata
and no `apply_patch` tool at all, only `exec_command`, through which the same patch is sent as
an `apply_patch` heredoc, which codex intercepts and applies (both seen working with 0.171.0).
A function-style `apply_patch` (arguments `{"input": patch}`, older codex versions) is answered
in kind, untried against a real CLI.

Codex's patch format works on whole lines (`*** Begin Patch` / `*** Update File: path` /
`@@` / `-old line` / `+new line` / `*** End Patch`), while the plan's edit replaces a
substring: the lines that hold `old` are read from the file under the working directory the
request names (`<cwd>` in codex's `<environment_context>`; the bot's sandbox binds the clone at
the same path, so the server on the host sees the same file). When the file cannot be read or
does not hold `old`, the patch removes `old`'s own lines, which are not in the file, and codex's
tool fails ("Failed to find expected lines"), as a model's bad edit does.

The edit was made once the conversation holds the output of our call (a
`custom_tool_call_output` or `function_call_output` with our call id, whether the tool
succeeded or failed); then the answer is the plan's final text.
"""

from __future__ import annotations

import gzip
import itertools
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from ..server import Edit, FakeModel, Step

DIALECT = "openai_responses"
CALL_PREFIX = "call_fakemodel_"  # our tool calls' ids: their outputs in the input mean "edited"
_ids = itertools.count(1)
_CWD = re.compile(r"<cwd>(.*?)</cwd>", re.DOTALL)


def routes(model: FakeModel) -> list[Route]:
    async def responses(request: Request):
        body = await _json(request)
        if not isinstance(body, dict):
            encoding = request.headers.get("content-encoding", "")
            message = f"expected a JSON object (content-encoding {encoding!r})"
            return JSONResponse({"error": {"message": message, "type": "invalid_request_error"}},
                                status_code=400)
        items = body.get("input") if isinstance(body.get("input"), list) else []
        if _request_kind(request, body) not in ("turn", None):
            # Not the agent's own turn (none seen from codex 0.171.0 exec): the plain answer.
            model.record(DIALECT, request, "side", body)
            step = Step(text=model.plan.final)
        else:
            step = model.next_step(edited=_our_call_output(items) is not None)
            model.record(DIALECT, request, "edit" if step.edit is not None else "final", body)
        response_id = f"resp_fake{next(_ids):06d}"
        output = _output(step, body.get("tools") or [], _cwd(items))
        usage = _usage(model)
        model_name = body.get("model") or model.plan.model or "fake-model"
        if body.get("stream") is False:
            return JSONResponse(_response(response_id, model_name, "completed", output, usage))
        return StreamingResponse(_events(response_id, model_name, output, usage),
                                 media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})

    # Codex 0.171.0 with a custom provider makes no side request (no /v1/models: the
    # openai_chat dialect answers that path for the CLIs that ask).
    return [Route("/v1/responses", responses, methods=["POST"])]


async def _json(request: Request) -> Any:
    raw = await request.body()
    encoding = request.headers.get("content-encoding", "").lower()
    if encoding == "gzip":
        raw = gzip.decompress(raw)
    elif encoding not in ("", "identity"):
        # Codex has request compression (zstd) for OpenAI's own endpoints; it sent plain JSON
        # to a custom provider here. An encoding this server cannot read is a 400, said plainly.
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None


def _request_kind(request: Request, body: dict[str, Any]) -> str | None:
    """Codex's `request_kind` ("turn" for the agent's own requests), from the
    x-codex-turn-metadata header or its copy in the body's client_metadata; None if absent."""
    raw = request.headers.get("x-codex-turn-metadata")
    if raw is None and isinstance(body.get("client_metadata"), dict):
        raw = body["client_metadata"].get("x-codex-turn-metadata")
    try:
        metadata = json.loads(raw) if raw else None
    except ValueError:
        return None
    kind = metadata.get("request_kind") if isinstance(metadata, dict) else None
    return kind if isinstance(kind, str) else None


def _our_call_output(items: list[Any]) -> dict[str, Any] | None:
    for item in items:
        if (isinstance(item, dict)
                and item.get("type") in ("custom_tool_call_output", "function_call_output")
                and str(item.get("call_id", "")).startswith(CALL_PREFIX)):
            return item
    return None


def _cwd(items: list[Any]) -> str | None:
    """The working directory codex names in its <environment_context> (the last one)."""
    found = None
    for item in items:
        if not isinstance(item, dict) or item.get("type") != "message":
            continue
        for part in item.get("content") or []:
            text = part.get("text") if isinstance(part, dict) else None
            if isinstance(text, str) and "<environment_context>" in text:
                match = _CWD.search(text)
                if match:
                    found = match.group(1).strip()
    return found


def patch_for(edit: Edit, cwd: str | None) -> str:
    """Codex's patch for `edit`: the whole lines that hold `old`, with `old` replaced by `new`."""
    old_lines = edit.old.split("\n")
    new_lines = edit.new.split("\n")
    text = None
    if cwd:
        try:
            text = (Path(cwd) / edit.path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            text = None
    if text is not None and edit.old and edit.old in text:
        at = text.index(edit.old)
        start = text.rfind("\n", 0, at) + 1
        end = text.find("\n", at + len(edit.old))
        end = len(text) if end == -1 else end
        before = text[start:end]
        old_lines = before.split("\n")
        new_lines = before.replace(edit.old, edit.new, 1).split("\n")
    lines = ["*** Begin Patch", f"*** Update File: {edit.path}", "@@"]
    lines += [f"-{line}" for line in old_lines]
    lines += [f"+{line}" for line in new_lines]
    lines.append("*** End Patch")
    return "\n".join(lines) + "\n"


def _tool(tools: list[Any], name: str) -> dict[str, Any] | None:
    for tool in tools:
        if isinstance(tool, dict) and tool.get("name") == name:
            return tool
    return None


def _output(step: Step, tools: list[Any], cwd: str | None) -> list[dict[str, Any]]:
    """The response's output items (complete), for `step`."""
    n = next(_ids)
    if step.edit is None:
        text = {"type": "output_text", "text": step.text, "annotations": [], "logprobs": []}
        return [{"id": f"msg_fake{n:06d}", "type": "message", "status": "completed",
                 "role": "assistant", "content": [text]}]
    patch = patch_for(step.edit, cwd)
    call_id = f"{CALL_PREFIX}{n:06d}"
    apply_patch = _tool(tools, "apply_patch")
    if apply_patch is not None and apply_patch.get("type") == "custom":
        return [{"id": f"ctc_fake{n:06d}", "type": "custom_tool_call", "status": "completed",
                 "call_id": call_id, "name": "apply_patch", "input": patch}]
    if apply_patch is not None:
        name, arguments = "apply_patch", {"input": patch}
    elif _tool(tools, "exec_command") is not None:
        name, arguments = "exec_command", {"cmd": f"apply_patch <<'EOF'\n{patch}EOF\n"}
    elif _tool(tools, "shell_command") is not None:
        name, arguments = "shell_command", {"command": f"apply_patch <<'EOF'\n{patch}EOF\n"}
    else:
        name, arguments = "shell", {"command": ["apply_patch", patch]}
    return [{"id": f"fc_fake{n:06d}", "type": "function_call", "status": "completed",
             "call_id": call_id, "name": name, "arguments": json.dumps(arguments)}]


def _usage(model: FakeModel) -> dict[str, Any]:
    plan = model.plan
    return {"input_tokens": plan.input_tokens, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": plan.output_tokens, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": plan.input_tokens + plan.output_tokens}


def _response(response_id: str, model_name: str, status: str, output: list[dict[str, Any]],
              usage: dict[str, Any] | None) -> dict[str, Any]:
    return {"id": response_id, "object": "response", "created_at": int(time.time()),
            "status": status, "error": None, "incomplete_details": None, "instructions": None,
            "model": model_name, "output": output, "parallel_tool_calls": True,
            "previous_response_id": None, "store": False, "tool_choice": "auto", "tools": [],
            "usage": usage}


def _events(response_id: str, model_name: str, output: list[dict[str, Any]],
            usage: dict[str, Any]) -> Iterator[str]:
    seq = itertools.count()

    def event(kind: str, **data: Any) -> str:
        payload = {"type": kind, "sequence_number": next(seq), **data}
        return f"event: {kind}\ndata: {json.dumps(payload)}\n\n"

    started = _response(response_id, model_name, "in_progress", [], None)
    yield event("response.created", response=started)
    yield event("response.in_progress", response=started)
    for index, item in enumerate(output):
        kind = item["type"]
        if kind == "message":
            text = item["content"][0]["text"]
            yield event("response.output_item.added", output_index=index,
                        item={**item, "status": "in_progress", "content": []})
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            yield event("response.content_part.added", item_id=item["id"], output_index=index,
                        content_index=0, part=part)
            for chunk in _chunks(text):
                yield event("response.output_text.delta", item_id=item["id"], output_index=index,
                            content_index=0, delta=chunk, logprobs=[])
            yield event("response.output_text.done", item_id=item["id"], output_index=index,
                        content_index=0, text=text, logprobs=[])
            yield event("response.content_part.done", item_id=item["id"], output_index=index,
                        content_index=0, part={**part, "text": text})
        elif kind == "custom_tool_call":
            yield event("response.output_item.added", output_index=index,
                        item={**item, "status": "in_progress", "input": ""})
            for chunk in _chunks(item["input"]):
                yield event("response.custom_tool_call_input.delta", item_id=item["id"],
                            output_index=index, delta=chunk)
            yield event("response.custom_tool_call_input.done", item_id=item["id"],
                        output_index=index, input=item["input"])
        elif kind == "function_call":
            yield event("response.output_item.added", output_index=index,
                        item={**item, "status": "in_progress", "arguments": ""})
            for chunk in _chunks(item["arguments"]):
                yield event("response.function_call_arguments.delta", item_id=item["id"],
                            output_index=index, delta=chunk)
            yield event("response.function_call_arguments.done", item_id=item["id"],
                        output_index=index, name=item["name"], arguments=item["arguments"])
        yield event("response.output_item.done", output_index=index, item=item)
    yield event("response.completed",
                response=_response(response_id, model_name, "completed", output, usage))


def _chunks(text: str, size: int = 24) -> Iterator[str]:
    for at in range(0, len(text), size):
        yield text[at:at + size]
