"""How fast POST /webhook answers a new delivery, next to /livez on the same server.

A delivery must be answered 202 within milliseconds (docs/architecture.md): the handler verifies
the signature, records the delivery and queues its job in one transaction before answering. This prints the latency
percentiles of both endpoints measured in one run and their ratio (the machine is noisy; the
ratio is what to compare between runs).

    .venv/bin/python bench/webhook_latency.py [--n 500]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from githubkit.webhooks import sign

from bot.logs import configure_logging
from tests.openapi import webhook_examples
from tests.serving import WEBHOOK_SECRET, make_config, serving


def pct(values: list[float], p: float) -> float:
    return statistics.quantiles(values, n=100)[int(p) - 1] if len(values) > 1 else values[0]


async def main(n: int) -> None:
    configure_logging("warning", "json")
    payload = webhook_examples("pull_request", action="synchronize")[0]
    body = json.dumps(payload).encode()
    with tempfile.TemporaryDirectory() as tmp:
        config = make_config(f"sqlite:///{tmp}/bench.db", jobs={"workers": 1, "idle_poll_seconds": 3600})
        async with serving(config) as (_rt, http):
            for _ in range(20):  # warm up connections and caches
                await http.get("/livez")
            live, hook = [], []
            for i in range(n):
                t = time.perf_counter()
                await http.get("/livez")
                live.append((time.perf_counter() - t) * 1000)
                headers = {"X-GitHub-Event": "pull_request", "X-GitHub-Delivery": str(uuid.uuid4()),
                           "X-Hub-Signature-256": sign(WEBHOOK_SECRET, body, "sha256"),
                           "Content-Type": "application/json"}
                t = time.perf_counter()
                r = await http.post("/webhook", content=body, headers=headers)
                hook.append((time.perf_counter() - t) * 1000)
                assert r.status_code == 202, r.text
                if (i + 1) % 100 == 0:
                    print(f"  {i + 1}/{n} deliveries", file=sys.stderr)
    print(f"deliveries: {n}, payload {len(body)} bytes, SQLite")
    for name, xs in (("/livez", live), ("/webhook", hook)):
        print(f"{name:9} p50 {pct(xs, 50):6.2f} ms  p95 {pct(xs, 95):6.2f} ms  p99 {pct(xs, 99):6.2f} ms")
    print(f"ratio webhook/livez: p50 {pct(hook, 50) / pct(live, 50):.1f}x  p99 {pct(hook, 99) / pct(live, 99):.1f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=500)
    asyncio.run(main(parser.parse_args().n))
