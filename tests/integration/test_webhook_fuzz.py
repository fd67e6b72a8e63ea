"""Property-based fuzzing of POST /webhook over real HTTP, on both backends.

Hypothesis sends deliveries of every routed event (GitHub's examples with the routed fields
replaced by anything, or bodies that are no example: deep nesting, huge integers, bytes, big
padding), in several encodings, with fuzzed event and delivery headers and good, wrong or
missing signatures. For each: never a 5xx; a bad signature is answered 401; a delivery is
recorded exactly when it is answered 202. At the end every stored string fits its column and
takes a round trip through UTF-8 without a NUL (SQLite stores what PostgreSQL would refuse, so
this is checked on the rows), and the server still answers.

The examples are the same on every run (`tests/hostile.py`, `FUZZ`), and few enough that each
backend's run takes a few seconds.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass

import httpx
from githubkit.webhooks import sign
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlmodel import select

from bot.intake.routing import storable
from storage import deliveries
from storage.models import Job, WebhookDelivery

from ..hostile import ENCODINGS, EVENTS, FUZZ, encode, payloads, raw_bodies
from ..serving import WEBHOOK_SECRET, make_config, serving

# What an HTTP/1.1 header value may carry (h11 refuses the rest on the client side already).
HEADER_TEXT = st.text(alphabet=st.sampled_from([chr(c) for c in (*range(0x20, 0x7F), 0x09, *range(0xA0, 0x100))]),
                      max_size=120).map(lambda s: s.strip(" \t"))
SIGNATURES = ("good",) * 6 + ("wrong secret", "other body", "missing", "no prefix")
FRESH = "fresh"  # a new delivery id each time it is sent (hypothesis repeats the values it draws)


@dataclass(frozen=True)
class Sent:
    body: bytes
    headers: list[tuple[bytes, bytes]]  # the delivery id header is added when sent
    delivery: str
    signed: bool


def one_in(n: int) -> st.SearchStrategy[bool]:
    """True about once in `n` (`st.integers` would favour its bounds)."""
    return st.sampled_from([False] * (n - 1) + [True])


@st.composite
def sent(draw) -> Sent:
    event = draw(HEADER_TEXT) if draw(one_in(8)) else draw(st.sampled_from(EVENTS))
    if event in EVENTS and not draw(one_in(4)):
        body = encode(draw(payloads(event)), draw(st.sampled_from(ENCODINGS)))
    else:
        body = draw(raw_bodies())
    delivery = draw(st.one_of(HEADER_TEXT, st.just("a-repeated-id"))) if draw(one_in(8)) else FRESH
    how = draw(st.sampled_from(SIGNATURES))
    signature = {
        "good": sign(WEBHOOK_SECRET, body, "sha256"),
        "wrong secret": sign("not-the-secret", body, "sha256"),
        "other body": sign(WEBHOOK_SECRET, body + b" ", "sha256"),
        "no prefix": sign(WEBHOOK_SECRET, body, "sha256").removeprefix("sha256="),
        "missing": None,
    }[how]
    headers = [(b"X-GitHub-Event", event.encode("latin-1")), (b"Content-Type", b"application/json")]
    if signature is not None:
        headers.append((b"X-Hub-Signature-256", signature.encode()))
    return Sent(body, headers, delivery, how == "good")


async def test_no_delivery_answers_5xx_or_is_recorded_unless_signed_and_answered_202(db_url):
    config = make_config(db_url, jobs={"workers": 1, "idle_poll_seconds": 3600})
    async with serving(config) as (rt, http):
        loop, fresh = asyncio.get_running_loop(), itertools.count()

        def recorded() -> int:
            return asyncio.run_coroutine_threadsafe(deliveries.count(rt.db), loop).result(timeout=30)

        with httpx.Client(base_url=str(http.base_url), timeout=30) as client:
            # Run off the event loop: the server answers on it while hypothesis waits for answers.
            @settings(FUZZ, max_examples=200)
            @given(one=sent())
            def fuzz(one: Sent) -> None:
                delivery = f"fuzz-{next(fresh)}" if one.delivery == FRESH else one.delivery
                headers = [*one.headers, (b"X-GitHub-Delivery", delivery.encode("latin-1"))]
                before = recorded()
                r = client.post("/webhook", content=one.body, headers=headers)
                assert r.status_code < 500, (r.status_code, r.text)
                if not one.signed:
                    assert r.status_code == 401, r.text
                assert recorded() - before == (1 if r.status_code == 202 else 0), (r.status_code, r.text)

            await asyncio.to_thread(fuzz)

        async with rt.db.session() as s:
            rows = list(await s.exec(select(WebhookDelivery)))
            keys = list(await s.exec(select(Job.key)))
        assert rows, "no delivery was recorded: the fuzzing sent nothing routable"
        for row in rows:
            assert storable(row.delivery_id, 100) and storable(row.event, 64), row
            assert row.action is None or storable(row.action, 64), row
            assert row.error is None, row  # nothing the routing could not read
        assert all(storable(key, 300) for key in keys)
        assert (await http.get("/livez")).status_code == 200
