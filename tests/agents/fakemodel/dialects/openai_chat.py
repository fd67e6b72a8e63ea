"""OpenAI Chat Completions (`POST /v1/chat/completions`), as GitHub Copilot CLI (BYOK, provider
type "openai", wire API "completions") and aider (through litellm) speak it.

Two ways to edit, told apart by the request:
- a request that offers tools (Copilot CLI): the first answer calls the CLI's own edit tool
  (`edit`: path, old_str, new_str) with the file's absolute path (the working directory is
  named in the system prompt); once a `tool` message is in the conversation (the edit's
  result, "No match found..." when it failed), the answer is the final text;
- a request without tools whose prompt teaches aider's edit format: the answer is the final
  text followed by the edit, as a SEARCH/REPLACE block (`--edit-format diff`; the lines that
  hold `old` in the file aider sent, since aider matches whole lines) or as a whole-file
  listing (`whole`, aider's default for a model it does not know). A SEARCH/REPLACE answer is
  given again whenever aider reports that a block failed to match and asks again (the
  failed-edit case: aider asks three times more); after anything else it sent back, the final
  text alone.
Any other request (a CLI's side request) gets the final text, recorded "side".

Streamed when the request says `stream` (Copilot CLI asks for a stream with
`stream_options.include_usage`; aider with `--no-stream` does not): `usage` goes in a last chunk
without choices when `include_usage` asks for it, and in every non-streamed answer. Neither CLI
asked for `/v1/models`, so it is not served (another dialect may want it).
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from ..server import Edit, FakeModel, Step, plain_text

DIALECT = "openai_chat"
DEFAULT_MODEL = "fake-model"

# Edit tools a CLI may offer, most specific first, with the arguments each takes. Copilot CLI
# 1.0.102 offers `edit` (path, old_str, new_str; the path absolute); the other two are the
# usual names elsewhere, not seen here.
EDIT_TOOLS = (
    ("str_replace_editor", {"command": "str_replace", "path": "{path}", "old_str": "{old}", "new_str": "{new}"}),
    ("edit", {"path": "{path}", "old_str": "{old}", "new_str": "{new}"}),
    ("str_replace", {"path": "{path}", "old_str": "{old}", "new_str": "{new}"}),
)
# Where a CLI names its working directory in the system prompt.
_CWD_PATTERNS = (
    re.compile(r"[Cc]urrent working directory[^\n/]*?(/[^\s`'\"<>]+)"),
    re.compile(r"<cwd>\s*(/[^\s<]+)\s*</cwd>"),
    re.compile(r"[Ww]orking directory[^\n/]*?(/[^\s`'\"<>]+)"),
)
# aider's words when a SEARCH block did not match the file.
_AIDER_FAILED = re.compile(r"SearchReplaceNoExactMatch|failed to match|did not match", re.IGNORECASE)


def routes(model: FakeModel) -> list[Route]:
    async def chat(request: Request):
        body = await request.json()
        messages = body.get("messages") or []
        tools = body.get("tools") or []
        name = body.get("model") or model.plan.model or DEFAULT_MODEL
        if tools:
            kind = "tools"
            step = model.next_step(edited=any(m.get("role") == "tool" for m in messages))
            call = _tool_call(step.edit, tools, messages) if step.edit is not None else None
            text = "" if call is not None else step.text or model.plan.final
            label = "edit" if call is not None else "final"
        elif _aider_format(messages) is not None:
            kind = f"aider-{_aider_format(messages)}"
            step = model.next_step(edited=_aider_edited(messages, model.plan.final))
            call = None
            text = _aider_answer(step, model.plan.final, messages)
            label = "edit" if text != model.plan.final else "final"
        else:
            kind = "side"
            call, text, label = None, model.plan.final, "side"
        model.record(DIALECT, request, label, {"kind": kind, "request": body,
                                                "answer": {"text": text, "tool_call": call}})
        usage = _usage(model)
        if body.get("stream"):
            include = bool((body.get("stream_options") or {}).get("include_usage"))
            return StreamingResponse(_chunks(name, text, call, usage if include else None),
                                     media_type="text/event-stream")
        return JSONResponse(_completion(name, text, call, usage))

    return [Route("/v1/chat/completions", chat, methods=["POST"])]


# --- the conversation ------------------------------------------------------------------------


def _system(messages: list[dict]) -> str:
    return "\n".join(plain_text(m.get("content")) for m in messages if m.get("role") in ("system", "developer"))


def _cwd(messages: list[dict]) -> str | None:
    system = _system(messages)
    for pattern in _CWD_PATTERNS:
        found = pattern.search(system)
        if found:
            return found.group(1).rstrip(".,;:)")
    return None


def _tool_call(edit: Edit, tools: list[dict], messages: list[dict]) -> dict | None:
    """A call of the CLI's own edit tool for `edit`, or None when it offers none we know."""
    offered = {t.get("function", {}).get("name"): t.get("function", {}) for t in tools}
    cwd = _cwd(messages)
    path = edit.path if edit.path.startswith("/") or cwd is None else f"{cwd.rstrip('/')}/{edit.path}"
    for name, template in EDIT_TOOLS:
        if name in offered:
            params = set((offered[name].get("parameters") or {}).get("properties", {}))
            args = {k: v.format(path=path, old=edit.old, new=edit.new) for k, v in template.items()
                    if not params or k in params}
            return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args)}}
    return None


def _aider_format(messages: list[dict]) -> str | None:
    """aider's edit format the prompt teaches: "diff", "whole", or None (not aider's prompt)."""
    system = _system(messages)
    if "SEARCH/REPLACE" in system:
        return "diff"
    if "*file listing*" in "\n".join(plain_text(m.get("content")) for m in messages):
        return "whole"
    return None


def _aider_edited(messages: list[dict], final: str) -> bool:
    """Whether aider applied our block: we answered with one already (aider's own example
    answers in the prompt hold SEARCH/REPLACE blocks too, but not our final text) and aider did
    not report a failed match in its last message."""
    answered = any(m.get("role") == "assistant" and final in plain_text(m.get("content"))
                   and "<<<<<<< SEARCH" in plain_text(m.get("content")) for m in messages)
    users = [m for m in messages if m.get("role") == "user"]
    failed = bool(users) and bool(_AIDER_FAILED.search(plain_text(users[-1].get("content"))))
    return answered and not failed


def _aider_answer(step: Step, final: str, messages: list[dict]) -> str:
    """The final text, and the edit in the format aider asked for (none when a whole-file
    listing cannot be made: `old` is not in the file)."""
    if step.edit is None:
        return step.text or final
    edit = step.edit
    if _aider_format(messages) == "whole":
        body = _file_body(edit.path, messages)
        if body is None or edit.old not in body:
            return final
        return f"{final}\n\n{edit.path}\n```\n{body.replace(edit.old, edit.new, 1)}\n```\n"
    search, replace = _whole_lines(edit, messages)
    return (f"{final}\n\n{edit.path}\n```\n<<<<<<< SEARCH\n{search}\n=======\n{replace}\n"
            f">>>>>>> REPLACE\n```\n")


def _file_body(path: str, messages: list[dict]) -> str | None:
    """The text of `path` as aider last sent it (`path`, then a fenced block, in a user
    message), or None."""
    header = f"{path}\n```"
    found = None
    for message in messages:
        text = plain_text(message.get("content")) if message.get("role") == "user" else ""
        at = text.find(header)
        while at >= 0:
            start = text.find("\n", at + len(header)) + 1
            end = text.find("\n```", start)
            found = text[start:end if end >= 0 else len(text)]
            at = text.find(header, at + 1)
    return found


def _whole_lines(edit: Edit, messages: list[dict]) -> tuple[str, str]:
    """The SEARCH and REPLACE texts for `edit`: aider matches whole lines, so `old` is widened
    to the lines that hold it in the file's text aider sent. An `old` that is not in the file
    stays as it is (the failed-edit case)."""
    body = _file_body(edit.path, messages)
    found = body.find(edit.old) if body is not None else -1
    if found < 0:
        return edit.old, edit.new
    start = body.rfind("\n", 0, found) + 1
    end = body.find("\n", found + len(edit.old))
    lines = body[start:end if end >= 0 else len(body)]
    return lines, lines.replace(edit.old, edit.new, 1)


# --- the wire format -------------------------------------------------------------------------

def _usage(model: FakeModel) -> dict:
    p, c = model.plan.input_tokens, model.plan.output_tokens
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


def _completion(name: str, text: str, call: dict | None, usage: dict) -> dict:
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if call is not None:
        message["tool_calls"] = [call]
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion",
        "created": int(time.time()), "model": name,
        "choices": [{"index": 0, "message": message,
                     "finish_reason": "tool_calls" if call is not None else "stop"}],
        "usage": usage,
    }


async def _chunks(name: str, text: str, call: dict | None, usage: dict | None) -> AsyncIterator[bytes]:
    base = {"id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion.chunk",
            "created": int(time.time()), "model": name}

    def event(choices: list, **extra) -> bytes:
        return f"data: {json.dumps({**base, 'choices': choices, **extra})}\n\n".encode()

    yield event([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])
    if text:
        for piece in re.findall(r".{1,40}", text, re.DOTALL):
            yield event([{"index": 0, "delta": {"content": piece}, "finish_reason": None}])
    if call is not None:
        yield event([{"index": 0, "delta": {"tool_calls": [{
            "index": 0, "id": call["id"], "type": "function",
            "function": {"name": call["function"]["name"], "arguments": ""}}]}, "finish_reason": None}])
        yield event([{"index": 0, "delta": {"tool_calls": [{
            "index": 0, "function": {"arguments": call["function"]["arguments"]}}]}, "finish_reason": None}])
    yield event([{"index": 0, "delta": {}, "finish_reason": "tool_calls" if call is not None else "stop"}])
    if usage is not None:
        yield event([], usage=usage)
    yield b"data: [DONE]\n\n"
