"""POST /webhook compares signatures in constant time (hmac.compare_digest), never with `==`.

No test can time the comparison, so this one watches it: a spy wrapping the real
hmac.compare_digest must see the signature the request carried, for a good and a bad one.
"""

from __future__ import annotations

import hmac
import json
import uuid

from githubkit.webhooks import sign

from ..serving import WEBHOOK_SECRET, make_config, serving


def _headers(signature: str) -> dict:
    return {"X-GitHub-Event": "ping", "X-GitHub-Delivery": str(uuid.uuid4()),
            "X-Hub-Signature-256": signature, "Content-Type": "application/json"}


def _as_text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def test_the_webhook_signature_is_compared_in_constant_time(db_url, monkeypatch):
    compared: list[tuple[str, str]] = []
    real = hmac.compare_digest

    def spy(a, b):
        compared.append((_as_text(a), _as_text(b)))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    body = json.dumps({"zen": "Keep it logically awesome.", "hook_id": 1}).encode()
    good = sign(WEBHOOK_SECRET, body, "sha256")
    # Same length, last character changed: `==` would also refuse it, only later.
    bad = good[:-1] + ("0" if good[-1] != "0" else "1")

    async with serving(make_config(db_url)) as (_, http):
        accepted = await http.post("/webhook", content=body, headers=_headers(good))
        assert accepted.status_code == 202, accepted.text
        assert any(good in pair for pair in compared), compared

        compared.clear()
        refused = await http.post("/webhook", content=body, headers=_headers(bad))
        assert refused.status_code == 401, refused.text
        assert any(bad in pair for pair in compared), compared
        assert all(good in pair for pair in compared if bad in pair)  # against the right digest


async def test_a_non_ascii_signature_is_refused_like_any_bad_one(db_url):
    # hmac.compare_digest raises TypeError on a non-ASCII str: that must be a 401, not a 500.
    async with serving(make_config(db_url)) as (rt, http):
        headers = _headers("") | {"X-Hub-Signature-256": "sha256=\u00e9".encode()}  # sent as UTF-8 bytes
        r = await http.post("/webhook", content=b"{}", headers=headers)
        assert r.status_code == 401
