"""Injected request faults: errors, rate limiting, slowness, hangs, and answers rewritten into
something GitHub's API does not document, for matching requests."""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass, field
from typing import Any

from .errors import Unprocessable

FAULT_STATUSES = (401, 403, 404, 405, 429, 500, 502, 503)

# What `rewrite` makes of an answer's body (docs/simulator.md, "Request faults").
REWRITES = ("html", "truncated", "empty", "missing", "wrong_types", "null_nodes", "bad_base64", "next_loop")
HTML = "text/html; charset=utf-8"
HTML_PAGE = (b"<!DOCTYPE html>\n<html><head><title>Unicorn! &middot; GitHub</title></head>"
             b"<body><h1>No server is currently available to service your request.</h1></body></html>\n")
BAD_BASE64 = "%%% not base64 %%%"


@dataclass
class Fault:
    """Applies to requests whose method and path match, `count` times (None: until cleared).

    Exactly one effect: `status` (an error answer; 403/429 come with Retry-After and an
    exhausted rate limit), `drop` (hold the request open until the client gives up), or only
    `delay` (answer normally after `delay` seconds). `delay` also postpones a `status`.
    `rewrite` (one of REWRITES) changes the body of the answer sent, the handler's or the
    `status` one, into something GitHub does not document (`rewritten`).
    """

    id: int
    path: str  # a regular expression searched in the request path
    method: str = "*"
    status: int | None = None
    retry_after: int = 60
    delay: float = 0.0
    drop: bool = False
    rewrite: str | None = None
    count: int | None = None
    hits: int = 0
    _pattern: re.Pattern = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.method = self.method.upper()
        try:
            self._pattern = re.compile(self.path)
        except re.error as e:
            raise Unprocessable(f"path is not a regular expression: {e}", "path") from None
        if self.status is not None and self.status not in FAULT_STATUSES:
            raise Unprocessable(f"status must be one of {FAULT_STATUSES}", "status")
        if self.rewrite is not None and self.rewrite not in REWRITES:
            raise Unprocessable(f"rewrite must be one of {REWRITES}", "rewrite")
        if self.status is None and not self.drop and self.delay <= 0 and self.rewrite is None:
            raise Unprocessable("a fault needs a status, drop, a rewrite or a positive delay", "status")

    def matches(self, method: str, path: str) -> bool:
        if self.count is not None and self.hits >= self.count:
            return False
        return self.method in ("*", method.upper()) and bool(self._pattern.search(path))

    def to_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}


class Faults:
    def __init__(self) -> None:
        self.rules: list[Fault] = []
        self._ids = itertools.count(1)

    def add(self, path: str, **options) -> Fault:
        fault = Fault(id=next(self._ids), path=path, **options)
        self.rules.append(fault)
        return fault

    def take(self, method: str, path: str) -> Fault | None:
        """The first matching fault, counted as used."""
        for fault in self.rules:
            if fault.matches(method, path):
                fault.hits += 1
                return fault
        return None

    def clear(self, fault_id: int | None = None) -> None:
        self.rules = [f for f in self.rules if fault_id is not None and f.id != fault_id]


def rewritten(kind: str, body: bytes, media_type: str) -> tuple[bytes, str]:
    """An answer's body, and its media type, as the `rewrite` fault `kind` sends it instead:

    - `html`: an HTML error page, as a proxy in front of GitHub answers;
    - `truncated`: the first half of the JSON;
    - `empty`: no body at all;
    - `missing`: every object within the answer emptied of its fields; the outermost ones (the
      answer, or a list's items) keep theirs: a GraphQL answer keeps `data`, which is emptied,
      and a PR its `head`, which loses `ref` and `sha`;
    - `wrong_types`: every string, number and boolean of another type (nulls stay);
    - `null_nodes`: every element of every list null;
    - `bad_base64`: every `content` string (a file's, base64) not base64;
    - `next_loop`: the body as it is, under a `Link: rel="next"` back to the page itself.

    A body that is not JSON (an answer without one) is left as it is for the JSON kinds."""
    if kind == "html":
        return HTML_PAGE, HTML
    if kind == "truncated":
        return body[: len(body) // 2], media_type
    if kind == "empty":
        return b"", media_type
    if kind == "next_loop":
        return body, media_type  # the gateway sets the Link header
    try:
        data = json.loads(body)
    except ValueError:
        return body, media_type
    change = {"missing": _emptied, "wrong_types": _retyped, "null_nodes": _nulled,
              "bad_base64": _unencoded}[kind]
    return json.dumps(change(data, True)).encode(), media_type


def _emptied(value: Any, outermost: bool = False) -> Any:
    if isinstance(value, dict):
        return {k: _emptied(v) for k, v in value.items()} if outermost else {}
    if isinstance(value, list):
        return [_emptied(v, outermost) for v in value]
    return value


def _retyped(value: Any, _outermost: bool = False) -> Any:
    if isinstance(value, dict):
        return {k: _retyped(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_retyped(v) for v in value]
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return len(value)
    return value


def _nulled(value: Any, _outermost: bool = False) -> Any:
    if isinstance(value, dict):
        return {k: _nulled(v) for k, v in value.items()}
    if isinstance(value, list):
        return [None for _ in value]
    return value


def _unencoded(value: Any, _outermost: bool = False) -> Any:
    if isinstance(value, dict):
        return {k: BAD_BASE64 if k == "content" and isinstance(v, str) else _unencoded(v)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_unencoded(v) for v in value]
    return value
