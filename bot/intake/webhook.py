"""POST /webhook: verify, record once, queue, answer as soon as that is committed.

Recording goes through the intake (`intake.py`): deliveries arriving together are committed in
one transaction, and each is answered after its batch's commit.

A signed delivery is still not trusted to be well formed. What is recorded of it (the event and
delivery id headers, the action) must fit its column on both backends, or the request is
answered 400 and nothing is recorded; the body must be JSON (UTF-8, -16 or -32) nested less
deep than Python's recursion limit (about a thousand levels), else 400. Only the fields some
reader uses are built (`parse_read`), and an integer past 4300 digits (Python's own limit) in one
of them is refused 400 as well. The routing reads those fields one by one
(`bot/intake/routing.py`), so a payload that names no PR it can read is recorded and ignored.
No hostile body answers 500.

The endpoint is a plain ASGI callable (`WebhookEndpoint`), which the app calls ahead of
Starlette's routing (`bot/surfaces/web/app.py`): it is the one hot path of the server, and Starlette's
Request, its JSONResponse and its middleware cost more per delivery than the checks here.
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import msgspec
import structlog

from bot import logs, metrics
from bot.engine import repoconfig
from bot.github.installations import learn_from_payload
from bot.intake.batch import BatchFailed, Intake
from bot.intake.routing import (
    KNOWN_EVENTS,
    PAYLOAD_READ,
    EnrollRules,
    Routed,
    route,
    storable,
)
from bot.runtime.context import Runtime
from storage.deliveries import Delivery

log = structlog.get_logger(__name__)

MAX_BODY_BYTES = 25 * 1024 * 1024
MAX_EVENT = 64  # `webhook_deliveries.event` and `.action`
MAX_DELIVERY_ID = 100  # `webhook_deliveries.delivery_id`

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

# The headers read, by their lowercased names as ASGI gives them.
_WANTED = frozenset({b"content-length", b"x-hub-signature-256", b"x-github-event", b"x-github-delivery"})


class _Disconnected(Exception):
    """The client went away before its body was read whole."""


# The answer's JSON is rendered as Starlette's JSONResponse renders it (compact, UTF-8 unescaped)
# by msgspec, in a fraction of the standard library's time.
_JSON_TYPE = (b"content-type", b"application/json")


async def _respond(send: Send, status: int, content: dict) -> None:
    body = msgspec.json.encode(content)
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-length", str(len(body)).encode()), _JSON_TYPE]})
    await send({"type": "http.response.body", "body": body})


def _error(message: str) -> dict:
    return {"error": message}


def _headers(scope: Scope) -> dict[bytes, str]:
    """The headers this endpoint reads, decoded as Starlette does (latin-1); of a header sent
    twice, the first."""
    found: dict[bytes, str] = {}
    for name, value in scope["headers"]:
        if name in _WANTED and name not in found:
            found[name] = value.decode("latin-1")
    return found


async def _read_body(headers: dict[bytes, str], receive: Receive) -> bytes | None:
    """The raw body, or None once it passes the 25 MB GitHub caps payloads at."""
    declared = headers.get(b"content-length")
    if declared and declared.isascii() and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        return None
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Disconnected
        chunk = message.get("body", b"")
        if chunk:
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                return None
        if not message.get("more_body", False):
            break
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _header(headers: dict[bytes, str], name: bytes, limit: int) -> str | None:
    """A header that is there, at most `limit` characters, and printable: no NUL or control
    character reaches the database or a log line."""
    value = headers.get(name, "").strip()
    return value if value and len(value) <= limit and value.isprintable() else None


_DECODER = msgspec.json.Decoder()


def parse(body: bytes) -> Any:
    """The JSON body, parsed by msgspec (a 24 KB `pull_request` payload in ~33 µs, against the
    standard library's ~74 µs: the largest single cost of a delivery), or by `json.loads` when
    msgspec refuses it. msgspec takes UTF-8 only and refuses NaN, infinities and lone
    surrogates; what it refuses is parsed as before (UTF-16 and -32, a BOM, the standard
    library's errors), and what it takes parses to the same values (integers of any length
    included), so the answer to any body is unchanged (`tests/unit/test_webhook_parse.py`)."""
    try:
        return _DECODER.decode(body)
    except msgspec.MsgspecError:
        return json.loads(body)


def _reading(tree: dict[str, Any], name: str) -> type:
    """A msgspec Struct of the fields `tree` names (`routing.PAYLOAD_READ`), each absent
    (UNSET) unless the body has it: a leaf of any type, an object as a Struct of its own, or
    None. An object field holding anything else fails the decode."""
    fields: list[tuple[str, Any, Any]] = []
    for field, below in tree.items():
        if below is None:
            kind: Any = Any
        elif isinstance(below, list):
            kind = list[_reading(below[0], f"{name}_{field}")] | None | msgspec.UnsetType  # type: ignore[misc]
        else:
            kind = _reading(below, f"{name}_{field}") | None | msgspec.UnsetType
        fields.append((field, kind, msgspec.UNSET))
    return msgspec.defstruct(name, fields)


_READ_DECODER: msgspec.json.Decoder[Any] = msgspec.json.Decoder(_reading(PAYLOAD_READ, "Read"))


def parse_read(body: bytes) -> Any:
    """The JSON body with only the fields the handler's readers use (`routing.PAYLOAD_READ`):
    msgspec skips the rest of a 24 KB `pull_request` payload without building it, which was
    most of the parse's cost under load. The readers see the same values as in the whole
    payload (tests/unit/test_webhook_parse.py compares what they decide from each).

    Anything else is left to `parse`, which then answers as it would for the whole body: a body
    that is not plain UTF-8 (JSON's other encodings, a BOM, bytes no decoder takes), one msgspec
    refuses (NaN, a lone surrogate escape, nesting past the recursion limit), one that is no
    object, or a field read that is an object in the tree and something else in the body. The
    one difference: an integer past 4300 digits in a field no reader uses is skipped like the
    rest of that field, where the whole parse refuses the body."""
    try:
        body.decode()  # skipped strings are not decoded: their bytes are checked here
        return msgspec.to_builtins(_READ_DECODER.decode(body))
    except (UnicodeDecodeError, msgspec.MsgspecError, RecursionError):
        return parse(body)


def verify(secret: str, body: bytes, signature: str) -> bool:
    """Whether `signature` is `sha256=` and the body's HMAC-SHA256 under `secret` in hex (what
    githubkit's `verify` does, in one `hmac.digest`). Compared with hmac.compare_digest, in
    constant time: how long a forged signature takes to be refused does not tell a sender how
    many of its leading characters were right (`==` stops at the first wrong one)."""
    return hmac.compare_digest("sha256=" + hmac.digest(secret.encode(), body, "sha256").hex(), signature)


def intake(rt: Runtime) -> Intake:
    """The process's one intake, made on first use (its writer task runs only while there is work)."""
    found = rt.webhook_intake
    if found is None or found.db is not rt.db:
        cfg = rt.config.server
        found = rt.webhook_intake = Intake(
            rt.db, max_wait_seconds=cfg.webhook_batch_wait_seconds, max_batch=cfg.webhook_batch_max,
            wake=rt.wake_workers,
        )
    return found


def _rules(rt: Runtime) -> EnrollRules:
    """The routing's rules from the runtime's config, made once per config (not per delivery)."""
    pushes = rt.own_pushes
    found = rt.webhook_rules
    if found is None or found[0] is not rt.config or found[1].own_pushes is not pushes:
        cfg = rt.config.convergence
        rules = EnrollRules(cfg.label, frozenset(a.lower() for a in cfg.auto_enroll_authors),
                            bot_login=rt.config.github.bot_login, own_pushes=pushes,
                            max_prs=rt.config.webhooks.max_prs_per_delivery)
        found = rt.webhook_rules = (rt.config, rules)
    return found[1]


_counters: dict[tuple[str, str], Any] = {}


def _count(label: str, outcome: str) -> None:
    """`convergebot_webhooks_total{event, outcome}` += 1, its child looked up once."""
    counter = _counters.get((label, outcome))
    if counter is None:
        counter = _counters[(label, outcome)] = metrics.WEBHOOKS.labels(label, outcome)
    counter.inc()


class WebhookEndpoint:
    """POST /webhook as a plain ASGI app, for one runtime."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await receive_webhook(self.rt, scope, receive, send)


async def receive_webhook(rt: Runtime, scope: Scope, receive: Receive, send: Send) -> None:
    # In hand for the intake from its start to its answer: a batch closes once every request
    # in hand has joined it (`Intake.expecting`), not when its wait runs out.
    gate = intake(rt)
    with gate.expecting():
        status, content = await _take(rt, gate, scope, receive)
    await _respond(send, status, content)


async def _take(rt: Runtime, gate: Intake, scope: Scope, receive: Receive) -> tuple[int, dict]:
    """The answer to one delivery: read, checked, routed and recorded (or refused, and why)."""
    headers = _headers(scope)
    try:
        body = await _read_body(headers, receive)
    except _Disconnected:
        return 400, _error("client disconnected")
    if body is None:
        return 413, _error("payload larger than 25 MB")

    # The signature is checked on the raw bytes before anything is parsed or stored, in
    # constant time (`verify`).
    secret = rt.webhook_secret
    signature = headers.get(b"x-hub-signature-256", "")
    # ASCII only: hmac.compare_digest refuses a non-ASCII str (a TypeError, not a mismatch).
    if (not secret or not signature.isascii() or not signature.startswith("sha256=")
            or not verify(secret, body, signature)):
        # `github_event` in the log lines: structlog keeps the line's own name under `event`.
        log.warning("webhook.bad_signature", delivery_id=headers.get(b"x-github-delivery"))
        return 401, _error("missing or invalid X-Hub-Signature-256")

    event = _header(headers, b"x-github-event", MAX_EVENT)
    delivery_id = _header(headers, b"x-github-delivery", MAX_DELIVERY_ID)
    if event is None or delivery_id is None:
        return 400, _error("missing or malformed X-GitHub-Event or X-GitHub-Delivery header")
    try:
        payload = parse_read(body)
    except ValueError as e:  # not UTF-8/16/32, not JSON, or an integer past 4300 digits
        return 400, _error(f"malformed JSON: {e}")
    except RecursionError:
        return 400, _error("malformed JSON: nested too deeply")
    if not isinstance(payload, dict):
        return 400, _error("payload is not a JSON object")
    action = payload.get("action")
    if action is not None and not (isinstance(action, str) and storable(action, MAX_EVENT)):
        return 400, _error(f"action is not a string of at most {MAX_EVENT} storable characters")

    learn_from_payload(rt.github, payload)  # which installation the repository is on: no lookup
    error = None
    try:
        routed = route(event, payload, delivery_id, _rules(rt))
    except Exception as e:
        # The routing reads every field as "its type or absent", so this is a bug; recorded and
        # ignored all the same, since GitHub would send the same payload again after a 500.
        log.exception("webhook.unroutable", delivery_id=delivery_id, github_event=event, action=action)
        routed, error = Routed("ignored", "the payload could not be routed"), repr(e)[:1000]
    if event == "push" and (changed := repoconfig.touched(payload)) is not None:
        repoconfig.forget(rt, changed)  # its .github/convergebot.toml changed: read it at next use
    label = event if event in KNOWN_EVENTS else "other"  # a sender cannot grow the metric's series
    try:
        new = await gate.submit(Delivery(
            delivery_id, event, action, routed.outcome, error, tuple(w.job() for w in routed.wakes),
        ))
    except BatchFailed as e:
        # Nothing of this delivery was stored: not acknowledged, so GitHub may deliver it again.
        log.error("webhook.not_recorded", delivery_id=delivery_id, github_event=event, action=action,
                  error=str(e))
        _count(label, "not_recorded")
        return 503, _error("the delivery could not be recorded; deliver it again")
    if not new:
        if logs.enabled(logging.INFO):
            log.info("webhook.duplicate", delivery_id=delivery_id, github_event=event, action=action)
        _count(label, "duplicate")
        return 200, {"delivery_id": delivery_id, "outcome": "duplicate"}
    if logs.enabled(logging.INFO):  # every delivery: not even a logger's bind when filtered out
        log.info("webhook.accepted", delivery_id=delivery_id, github_event=event, action=action,
                 outcome=routed.outcome, reason=routed.reason, jobs=len(routed.wakes))
    _count(label, routed.outcome)
    metrics.webhook_woke(w.pr_key for w in routed.wakes)
    return 202, {"delivery_id": delivery_id, "outcome": routed.outcome, "reason": routed.reason}
