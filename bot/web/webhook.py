"""POST /webhook: verify, record once, queue, answer as soon as that is committed.

Recording goes through the intake (`intake.py`): deliveries arriving together are committed in
one transaction, and each is answered after its batch's commit.

A signed delivery is still not trusted to be well formed. What is recorded of it (the event and
delivery id headers, the action) must fit its column on both backends, or the request is
answered 400 and nothing is recorded; the JSON is parsed with a depth limit (Python's recursion
limit, about a thousand levels) and integers of at most 4300 digits (Python's own limit), else
400. The routing reads the rest of the payload field by field (`bot/webhooks/routing.py`), so
a payload that names no PR it can read is recorded and ignored. No hostile body answers 500.
"""

from __future__ import annotations

import json

import structlog
from githubkit.webhooks import verify
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse

from bot import metrics, repoconfig
from bot.github.installations import learn_from_payload
from bot.runtime import Runtime
from bot.web.intake import BatchFailed, Intake
from bot.webhooks.routing import KNOWN_EVENTS, EnrollRules, Routed, own_pushes, route, storable
from storage.deliveries import Delivery

log = structlog.get_logger(__name__)

MAX_BODY_BYTES = 25 * 1024 * 1024
MAX_EVENT = 64  # `webhook_deliveries.event` and `.action`
MAX_DELIVERY_ID = 100  # `webhook_deliveries.delivery_id`


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


async def _read_body(request: Request) -> bytes | None:
    """The raw body, or None once it passes the 25 MB GitHub caps payloads at."""
    declared = request.headers.get("content-length")
    if declared and declared.isascii() and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        return None
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            return None
    return bytes(body)


def _header(request: Request, name: str, limit: int) -> str | None:
    """A header that is there, at most `limit` characters, and printable: no NUL or control
    character reaches the database or a log line."""
    value = request.headers.get(name, "").strip()
    return value if value and len(value) <= limit and value.isprintable() else None


def intake(rt: Runtime) -> Intake:
    """The process's one intake, made on first use (its writer task runs only while there is work)."""
    found = rt.extras.get("webhook_intake")
    if found is None or found.db is not rt.db:
        cfg = rt.config.server
        found = rt.extras["webhook_intake"] = Intake(
            rt.db, max_wait_seconds=cfg.webhook_batch_wait_seconds, max_batch=cfg.webhook_batch_max,
            wake=rt.wake_workers,
        )
    return found


async def receive_webhook(request: Request) -> JSONResponse:
    rt = request.app.state.runtime
    try:
        body = await _read_body(request)
    except ClientDisconnect:
        return _error(400, "client disconnected")
    if body is None:
        return _error(413, "payload larger than 25 MB")

    # The signature is checked on the raw bytes before anything is parsed or stored. The
    # constant-time comparison happens here: githubkit's `verify` compares with
    # hmac.compare_digest, so how long a forged signature takes to be refused does not tell a
    # sender how many of its leading characters were right (`==` stops at the first wrong one).
    secret = rt.webhook_secret
    signature = request.headers.get("x-hub-signature-256", "")
    # ASCII only: hmac.compare_digest refuses a non-ASCII str (a TypeError, not a mismatch).
    if (not secret or not signature.isascii() or not signature.startswith("sha256=")
            or not verify(secret, body, signature)):
        log.warning("webhook.bad_signature", delivery_id=request.headers.get("x-github-delivery"))
        return _error(401, "missing or invalid X-Hub-Signature-256")

    event = _header(request, "x-github-event", MAX_EVENT)
    delivery_id = _header(request, "x-github-delivery", MAX_DELIVERY_ID)
    if event is None or delivery_id is None:
        return _error(400, "missing or malformed X-GitHub-Event or X-GitHub-Delivery header")
    try:
        payload = json.loads(body)
    except ValueError as e:  # not UTF-8/16/32, not JSON, or an integer past 4300 digits
        return _error(400, f"malformed JSON: {e}")
    except RecursionError:
        return _error(400, "malformed JSON: nested too deeply")
    if not isinstance(payload, dict):
        return _error(400, "payload is not a JSON object")
    action = payload.get("action")
    if action is not None and not (isinstance(action, str) and storable(action, MAX_EVENT)):
        return _error(400, f"action is not a string of at most {MAX_EVENT} storable characters")

    learn_from_payload(rt.github, payload)  # which installation the repository is on: no lookup
    cfg = rt.config.convergence
    rules = EnrollRules(cfg.label, frozenset(a.lower() for a in cfg.auto_enroll_authors),
                        bot_login=rt.config.github.bot_login, own_pushes=own_pushes(rt),
                        max_prs=rt.config.webhooks.max_prs_per_delivery)
    # `github_event`: structlog keeps the log line's own name under `event`.
    bound = log.bind(delivery_id=delivery_id, github_event=event, action=action)
    error = None
    try:
        routed = route(event, payload, delivery_id, rules)
    except Exception as e:
        # The routing reads every field as "its type or absent", so this is a bug; recorded and
        # ignored all the same, since GitHub would send the same payload again after a 500.
        bound.exception("webhook.unroutable")
        routed, error = Routed("ignored", "the payload could not be routed"), repr(e)[:1000]
    if event == "push" and (changed := repoconfig.touched(payload)) is not None:
        repoconfig.forget(rt, changed)  # its .github/convergebot.toml changed: read it at next use
    label = event if event in KNOWN_EVENTS else "other"  # a sender cannot grow the metric's series
    try:
        new = await intake(rt).submit(Delivery(
            delivery_id, event, action, routed.outcome, error, tuple(w.job() for w in routed.wakes),
        ))
    except BatchFailed as e:
        # Nothing of this delivery was stored: not acknowledged, so GitHub may deliver it again.
        bound.error("webhook.not_recorded", error=str(e))
        metrics.WEBHOOKS.labels(label, "not_recorded").inc()
        return _error(503, "the delivery could not be recorded; deliver it again")
    if not new:
        bound.info("webhook.duplicate")
        metrics.WEBHOOKS.labels(label, "duplicate").inc()
        return JSONResponse({"delivery_id": delivery_id, "outcome": "duplicate"}, status_code=200)
    bound.info("webhook.accepted", outcome=routed.outcome, reason=routed.reason, jobs=len(routed.wakes))
    metrics.WEBHOOKS.labels(label, routed.outcome).inc()
    metrics.webhook_woke(w.pr_key for w in routed.wakes)
    return JSONResponse(
        {"delivery_id": delivery_id, "outcome": routed.outcome, "reason": routed.reason}, status_code=202
    )
