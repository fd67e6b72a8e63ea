"""The Gemini API (generativelanguage v1beta) as Gemini CLI speaks it.

Gemini CLI is pointed here with `GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:PORT` and any
`GEMINI_API_KEY`. In 0.61 that variable alone selects its "gateway" auth, which headless mode
rejects ("Invalid auth method selected.", exit 41), so its settings must also name
`"security": {"auth": {"selectedType": "gemini-api-key"}}` (docs/fixers.md, "Presets"). Its
@google/genai client posts to `/v1beta/models/{model}:{method}`:

- `streamGenerateContent?alt=sse`: the conversation. Server-sent events, each `data: {...}` a
  GenerateContentResponse (`candidates[0].content.parts`, `finishReason`, `usageMetadata`).
  The first answer calls the CLI's edit tool (`replace`: file_path, old_string, new_string,
  absolute paths; `write_file` where no `replace` is declared); once the contents hold a
  `functionResponse` for that call, the final text.
- `generateContent`: side requests. With a JSON schema (`generationConfig.responseJsonSchema`
  or `responseSchema`: the model router's complexity classifier, which 0.61 sends first with
  `--model` left at "auto"; the "next speaker" check and loop detection of other versions) the
  answer is an object that fits it, steering the CLI to stop (`next_speaker`
  "user", no loop); without one, short plain text.
- `countTokens`: a token count.

The working directory is read from the request's text (Gemini CLI 0.61 lists it in the
`<session_context>` of the first user message, under "Workspace Directories:"; older versions
said "I'm currently working in the directory: ..."), so the tool call names an absolute path.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

DIALECT = "gemini"
EDIT_TOOLS = ("replace", "write_file")
# How Gemini CLI names its working directory in the text it sends (the session context, the
# system instruction); the first that matches wins.
CWD_PATTERNS = (
    re.compile(r"Workspace Directories:\**\s*\n\s*-\s*(/\S+)"),
    re.compile(r"working in the directory:?\s*[`'\"]?(/[^\s`'\"]+)"),
    re.compile(r"(?:current working directory|project directory|workspace directory)(?: is)?:?\s*"
               r"[`'\"]?(/[^\s`'\"]+)", re.IGNORECASE),
)
CALL_ID = "fake-edit-"  # our edit call's id; Gemini CLI echoes it in the functionResponse
# Answers for JSON side requests, by property name: they let the CLI end its turn.
JSON_ANSWERS: dict[str, Any] = {
    "next_speaker": "user",
    "reasoning": "The model answered; the user speaks next.",
    "unproductive_state_analysis": "No loop.",
    "unproductive_state_confidence": 0.0,
    "model_choice": "flash",
    "complexity_reasoning": "A simple edit.",
    "complexity_score": 1,
}


def routes(model) -> list[Route]:
    async def models(request: Request) -> Response:
        target = request.path_params["target"]
        name, _, method = target.rpartition(":")
        if not name:
            return await _unknown(model, request)
        body = await _json(request)
        if method == "streamGenerateContent":
            return _generate(model, request, name, body, stream=True)
        if method == "generateContent":
            return _generate(model, request, name, body, stream=False)
        if method == "countTokens":
            model.record(DIALECT, request, "side", body)
            return JSONResponse({"totalTokens": model.plan.input_tokens})
        return await _unknown(model, request, body)

    async def unknown(request: Request) -> Response:
        return await _unknown(model, request)

    return [
        Route("/v1beta/models/{target:path}", models, methods=["POST"]),
        Route("/v1beta/{rest:path}", unknown, methods=["GET", "POST", "PUT", "DELETE"]),
    ]


async def _json(request: Request) -> Any:
    raw = await request.body()
    try:
        return json.loads(raw) if raw else {}
    except ValueError:
        return {"_raw": raw.decode("utf-8", errors="replace")}


async def _unknown(model, request: Request, body: Any = None) -> Response:
    if body is None:
        body = await _json(request)
    model.record(DIALECT, request, "side", {"unhandled": f"{request.method} {request.url.path}",
                                              "body": body})
    return JSONResponse({"error": {"code": 404, "message": f"not found: {request.url.path}",
                                   "status": "NOT_FOUND"}}, status_code=404)


def _generate(model, request: Request, name: str, body: dict, *, stream: bool) -> Response:
    tools = _declared_tools(body)
    schema = _json_schema(body)
    main = any(t in tools for t in EDIT_TOOLS) and schema is None
    if not main:
        model.record(DIALECT, request, "side", body)
        if schema is not None:
            text = json.dumps(_fill(schema))
        else:
            text = "OK."
        return _answer([{"text": text}], model, name, stream=stream)
    step = model.next_step(edited=_edit_answered(body))
    if step.edit is None:
        model.record(DIALECT, request, "final", body)
        return _answer([{"text": step.text}], model, name, stream=stream)
    model.record(DIALECT, request, "edit", body)
    call = _edit_call(step.edit, tools, _cwd(body))
    return _answer([{"functionCall": call}], model, name, stream=stream)


def _declared_tools(body: dict) -> dict[str, dict]:
    tools: dict[str, dict] = {}
    for tool in body.get("tools") or ():
        for decl in tool.get("functionDeclarations") or ():
            if isinstance(decl, dict) and decl.get("name"):
                tools[decl["name"]] = decl
    return tools


def _json_schema(body: dict) -> dict | None:
    config = body.get("generationConfig") or {}
    schema = config.get("responseJsonSchema") or config.get("responseSchema")
    if schema is None and config.get("responseMimeType") == "application/json":
        return {}
    return schema


def _edit_answered(body: dict) -> bool:
    """Whether the conversation holds the result of our edit call (a success or an error)."""
    for content in body.get("contents") or ():
        for part in content.get("parts") or ():
            response = part.get("functionResponse")
            if not isinstance(response, dict):
                continue
            ours = str(response.get("id", "")).startswith(CALL_ID)
            if ours or (not response.get("id") and response.get("name") in EDIT_TOOLS):
                return True
    return False


def _texts(body: dict) -> list[str]:
    texts = []
    system = body.get("systemInstruction")
    if isinstance(system, dict):
        texts += [p.get("text", "") for p in system.get("parts") or () if isinstance(p, dict)]
    elif isinstance(system, str):
        texts.append(system)
    for content in body.get("contents") or ():
        texts += [p.get("text", "") for p in content.get("parts") or () if isinstance(p, dict)]
    return [t for t in texts if t]


def _cwd(body: dict) -> str | None:
    for pattern in CWD_PATTERNS:
        for text in _texts(body):
            match = pattern.search(text)
            if match:
                return match.group(1).rstrip(".,;:")
    return None


def _edit_call(edit, tools: dict[str, dict], cwd: str | None) -> dict:
    path = edit.path if cwd is None or edit.path.startswith("/") else f"{cwd}/{edit.path}"
    if "replace" in tools:
        args: dict[str, Any] = {"file_path": path, "old_string": edit.old, "new_string": edit.new}
        required = _params(tools["replace"]).get("required") or ()
        if "instruction" in required:
            args["instruction"] = f"Replace {edit.old!r} with {edit.new!r}."
        name = "replace"
    else:
        # No replace tool: write the whole file, read here (the server shares the CLI's disk).
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError:
            text = ""
        args = {"file_path": path, "content": text.replace(edit.old, edit.new, 1)}
        name = "write_file"
    return {"id": f"{CALL_ID}{uuid.uuid4().hex[:12]}", "name": name, "args": args}


def _params(decl: dict) -> dict:
    return decl.get("parametersJsonSchema") or decl.get("parameters") or {}


def _fill(schema: Any, name: str = "") -> Any:
    """A value that fits `schema` (JSON Schema or the API's OpenAPI subset)."""
    if not isinstance(schema, dict):
        return JSON_ANSWERS.get(name, "")
    kind = str(schema.get("type", "")).lower()
    enum = schema.get("enum")
    if name in JSON_ANSWERS and (not enum or JSON_ANSWERS[name] in enum):
        return JSON_ANSWERS[name]
    if enum:
        return enum[0]
    if kind == "object" or "properties" in schema:
        props = schema.get("properties") or {}
        return {key: _fill(sub, key) for key, sub in props.items()}
    if kind == "array":
        return []
    if kind in ("number", "integer"):
        return 0
    if kind == "boolean":
        return False
    return ""


def _usage(model) -> dict:
    plan = model.plan
    return {"promptTokenCount": plan.input_tokens, "candidatesTokenCount": plan.output_tokens,
            "totalTokenCount": plan.input_tokens + plan.output_tokens}


def _chunk(parts: list[dict], model, name: str, response_id: str, *, last: bool) -> dict:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    chunk: dict[str, Any] = {"candidates": [candidate], "modelVersion": name,
                             "responseId": response_id}
    if last:
        candidate["finishReason"] = "STOP"
        chunk["usageMetadata"] = _usage(model)
    return chunk


def _answer(parts: list[dict], model, name: str, *, stream: bool) -> Response:
    response_id = uuid.uuid4().hex[:16]
    if not stream:
        return JSONResponse(_chunk(parts, model, name, response_id, last=True))
    chunks: list[dict] = []
    text = parts[0].get("text") if len(parts) == 1 else None
    if text and len(text) > 1:
        # Text arrives in pieces, as the real API streams it.
        half = len(text) // 2
        chunks.append(_chunk([{"text": text[:half]}], model, name, response_id, last=False))
        chunks.append(_chunk([{"text": text[half:]}], model, name, response_id, last=True))
    else:
        chunks.append(_chunk(parts, model, name, response_id, last=True))

    async def events():
        for chunk in chunks:
            yield f"data: {json.dumps(chunk)}\r\n\r\n"

    return StreamingResponse(events(), media_type="text/event-stream")
