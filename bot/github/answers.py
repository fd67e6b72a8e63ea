"""Reading GitHub's answers: the JSON of a body, and the check that it holds what the bot reads
of it (`shapes.py`). An answer that is neither is `Malformed`, with one log line saying which
request and why; never a traceback out of a caller that reads a field."""

from __future__ import annotations

from typing import Any, TypeVar

import httpx
import msgspec
import pydantic
import structlog

from bot.github.errors import Malformed

log = structlog.get_logger(__name__)

T = TypeVar("T")


def malformed(what: str, why: str, status: int | None = 200) -> Malformed:
    """The error for an answer to `what` that cannot be read, logged once here. `why` names the
    place and the kind of fault, never the body's text (it may carry what the bot must not log);
    `status` is the answer's, a success (any other is a failure of its own, `failures.py`)."""
    log.warning("github.malformed", request=what, status=status, why=why)
    return Malformed(f"{what}: malformed answer ({why})", status)


def decoded(what: str, raw: httpx.Response) -> Any:
    """The JSON `raw` carries; Malformed when it is not JSON (an HTML page, a body cut short)."""
    try:
        return raw.json()
    except ValueError as e:
        kind = raw.headers.get("content-type", "no content type").partition(";")[0]
        raise malformed(what, f"not JSON ({kind}, {len(raw.content)} bytes): {_first_line(e)}",
                        raw.status_code) from None


def checked(what: str, data: T, shape: Any, status: int | None = 200) -> T:
    """`data` itself, once it holds each field the bot reads of it with the type GitHub
    documents (`shape`, a type of `shapes.py`); Malformed otherwise."""
    try:
        msgspec.convert(data, shape)
    except msgspec.ValidationError as e:
        raise malformed(what, str(e), status) from None
    return data


def unparsed(what: str, e: ValueError, status: int | None) -> Malformed:
    """A body githubkit could not read into its model (a GraphQL answer that is not JSON, or has
    neither `data` nor `errors`)."""
    if isinstance(e, pydantic.ValidationError):
        first = e.errors(include_url=False, include_input=False, include_context=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "the answer"
        return malformed(what, f"{where}: {first['msg']}", status)
    return malformed(what, _first_line(e), status)


def _first_line(e: Exception) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0][:200]
