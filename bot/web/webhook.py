"""POST /webhook: verify, record once, queue, answer as soon as that is committed.

Recording goes through the intake (`intake.py`): deliveries arriving together are committed in
one transaction, and each is answered after its batch's commit.
"""

from __future__ import annotations

import json

import structlog
from githubkit.webhooks import verify
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse

from bot import metrics
from bot.runtime import Runtime
from bot.web.intake import BatchFailed, Intake
from bot.webhooks.routing import EnrollRules, own_pushes, route
from storage.deliveries import Delivery

log = structlog.get_logger(__name__)

MAX_BODY_BYTES = 25 * 1024 * 1024


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


async def _read_body(request: Request) -> bytes | None:
    """The raw body, or None once it passes the 25 MB GitHub caps payloads at."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        return None
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            return None
    return bytes(body)


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
    if not secret or not signature.startswith("sha256=") or not verify(secret, body, signature):
        log.warning("webhook.bad_signature", delivery_id=request.headers.get("x-github-delivery"))
        return _error(401, "missing or invalid X-Hub-Signature-256")

    event = request.headers.get("x-github-event", "").strip()
    delivery_id = request.headers.get("x-github-delivery", "").strip()
    if not event or not delivery_id or len(delivery_id) > 100:
        return _error(400, "missing X-GitHub-Event or X-GitHub-Delivery header")
    try:
        payload = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        return _error(400, f"malformed JSON: {e}")
    if not isinstance(payload, dict):
        return _error(400, "payload is not a JSON object")

    action = payload.get("action") if isinstance(payload.get("action"), str) else None
    cfg = rt.config.convergence
    rules = EnrollRules(cfg.label, frozenset(a.lower() for a in cfg.auto_enroll_authors),
                        bot_login=rt.config.github.bot_login, own_pushes=own_pushes(rt))
    routed = route(event, payload, delivery_id, rules)
    bound = log.bind(delivery_id=delivery_id, event=event, action=action)
    try:
        new = await intake(rt).submit(Delivery(
            delivery_id, event, action, routed.outcome, None, tuple(w.job() for w in routed.wakes),
        ))
    except BatchFailed as e:
        # Nothing of this delivery was stored: not acknowledged, so GitHub may deliver it again.
        bound.error("webhook.not_recorded", error=str(e))
        metrics.WEBHOOKS.labels(event, "not_recorded").inc()
        return _error(503, "the delivery could not be recorded; deliver it again")
    if not new:
        bound.info("webhook.duplicate")
        metrics.WEBHOOKS.labels(event, "duplicate").inc()
        return JSONResponse({"delivery_id": delivery_id, "outcome": "duplicate"}, status_code=200)
    bound.info("webhook.accepted", outcome=routed.outcome, reason=routed.reason, jobs=len(routed.wakes))
    metrics.WEBHOOKS.labels(event, routed.outcome).inc()
    return JSONResponse(
        {"delivery_id": delivery_id, "outcome": routed.outcome, "reason": routed.reason}, status_code=202
    )
