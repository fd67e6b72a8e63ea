"""Webhook intake under load: POST /webhook next to a bare Starlette endpoint, in one run.

The real `serve` stack (SQLite, job workers running the jobs the deliveries queue) and a bare
Starlette app (reads the body, answers 202 with a small JSON) run on the same uvicorn settings
in this process. A separate load process (so the client does not take the server's event loop)
keeps 16 connections busy against each in turn and then sends deliveries at a fixed rate:

  1. saturation, 16 concurrent keep-alive connections, back to back: requests/s of both, the
     ratio webhook/bare, and /webhook's latency percentiles. The phase runs in slices that
     alternate between the two (`--slices`, 5 by default), so a drift in the machine's speed
     (it is shared) meets both endpoints alike;
  2. a fixed rate (200 deliveries/s by default) over the same 16 connections: /webhook's latency
     percentiles, measured from each request's scheduled send time (a late send counts).

Every delivery is signed, with its own delivery id, and carries the headers GitHub sends with
every delivery; the bare endpoint is sent the same ones (`--headers`). Each must be answered 202
and, at the end, be recorded once. The machine is noisy: compare the ratio, not the absolute numbers.

    .venv/bin/python bench/intake.py [--seconds 5] [--slices 5] [--rate 200] [--rate-seconds 10] [--client raw|httpx]

The load process speaks HTTP/1.1 over plain asyncio streams by default (`--client raw`): httpx
costs several times more CPU per request, enough on a small machine to cap the bare endpoint at
the client's speed. `--client httpx` uses an httpx connection pool instead.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CONNECTIONS = 16
TARGET_P99_MS = 25.0
TARGET_RATIO = 0.6


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    return statistics.quantiles(values, n=100)[int(p) - 1] if len(values) > 1 else values[0]


# --- the load process ------------------------------------------------------------------------


class RawConnection:
    """One keep-alive HTTP/1.1 connection: write a request, read the status and the body."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: bytes, headers: dict[str, str]) -> int:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        head = [f"POST {path} HTTP/1.1", f"Host: {self.host}:{self.port}", f"Content-Length: {len(body)}"]
        head += [f"{k}: {v}" for k, v in headers.items()]
        self.writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        await self.writer.drain()
        raw = await self.reader.readuntil(b"\r\n\r\n")
        status = int(raw[9:12])
        length = 0
        for line in raw.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        if length:
            await self.reader.readexactly(length)
        return status

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


class HttpxConnection:
    def __init__(self, client) -> None:
        self.client = client

    async def post(self, path: str, body: bytes, headers: dict[str, str]) -> int:
        return (await self.client.post(path, content=body, headers=headers)).status_code

    async def close(self) -> None:
        pass


def delivery_headers(path: str, signatures: tuple[str, str], event: str, headers: str) -> dict[str, str]:
    """A delivery's headers, the same to both endpoints (`--headers github`): the ones GitHub
    sends with every delivery to a hook with a secret (docs.github.com, "Webhook events and
    payloads", delivery headers), each delivery with its own id. `--headers short` sends the
    bare endpoint only Content-Type and /webhook only the three it reads, as this bench did
    before 4 December: the bare endpoint then parsed fewer headers than /webhook on the same
    server, which counted against /webhook."""
    sha1, sha256 = signatures
    delivery = {"X-GitHub-Event": event, "X-GitHub-Delivery": str(uuid.uuid4()), "X-Hub-Signature-256": sha256}
    if headers == "short":
        return {"Content-Type": "application/json"} | (delivery if path == "/webhook" else {})
    return {"Accept": "*/*", "Content-Type": "application/json", "User-Agent": "GitHub-Hookshot/5b4e2a1",
            "X-GitHub-Hook-ID": "424242", "X-GitHub-Hook-Installation-Target-ID": "79929171",
            "X-GitHub-Hook-Installation-Target-Type": "repository", "X-Hub-Signature": sha1} | delivery


async def load(args) -> dict:
    """Run one phase against one URL and return what it saw."""
    body = Path(args.body_file).read_bytes()
    host, port = "127.0.0.1", args.port
    client = None
    if args.client == "httpx":
        import httpx

        client = httpx.AsyncClient(
            base_url=f"http://{host}:{port}", timeout=30,
            limits=httpx.Limits(max_connections=CONNECTIONS, max_keepalive_connections=CONNECTIONS))
        conns = [HttpxConnection(client) for _ in range(CONNECTIONS)]
    else:
        conns = [RawConnection(host, port) for _ in range(CONNECTIONS)]
    statuses: dict[int, int] = {}
    latencies: list[float] = []

    def headers() -> dict[str, str]:  # a new delivery id each time
        return delivery_headers(args.path, (args.signature_sha1, args.signature), args.event, args.headers)

    async def one(conn, scheduled: float | None = None) -> None:
        sent = headers()
        t0 = time.perf_counter()
        status = await conn.post(args.path, body, sent)
        done = time.perf_counter()
        statuses[status] = statuses.get(status, 0) + 1
        latencies.append((done - (scheduled if scheduled is not None else t0)) * 1000)

    for conn in conns:  # open every connection first (and warm the path)
        await conn.post(args.path, body, headers())
    started = time.perf_counter()
    if args.rate:
        # Open loop: request i is due at started + i/rate, sent on the next free connection.
        free: asyncio.Queue = asyncio.Queue()
        for conn in conns:
            free.put_nowait(conn)
        n = int(args.rate * args.seconds)
        tasks = []

        async def send(conn, scheduled: float) -> None:
            try:
                await one(conn, scheduled)
            finally:
                free.put_nowait(conn)

        for i in range(n):
            due = started + i / args.rate
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            conn = await free.get()
            tasks.append(asyncio.create_task(send(conn, due)))
        await asyncio.gather(*tasks)
    else:
        # Closed loop: every connection sends back to back until the time is up.
        stop_at = started + args.seconds

        async def worker(conn) -> None:
            while time.perf_counter() < stop_at:
                await one(conn)

        await asyncio.gather(*(worker(c) for c in conns))
    elapsed = time.perf_counter() - started
    for conn in conns:
        await conn.close()
    if client is not None:
        await client.aclose()
    return {"n": len(latencies), "elapsed": elapsed, "statuses": statuses, "latencies": latencies,
            "warmup": len(conns)}


def merged(parts: list[dict]) -> dict:
    """Several runs of one phase as one: counts and times added, CPU per request over all."""
    requests = sum(p["n"] + p["warmup"] for p in parts)
    statuses: dict[str, int] = {}
    for p in parts:
        for code, k in p["statuses"].items():
            statuses[code] = statuses.get(code, 0) + k
    return {"n": sum(p["n"] for p in parts), "elapsed": sum(p["elapsed"] for p in parts),
            "statuses": statuses, "latencies": [v for p in parts for v in p["latencies"]],
            "warmup": sum(p["warmup"] for p in parts),
            "cpu_ms": sum(p["cpu_ms"] * (p["n"] + p["warmup"]) for p in parts) / max(requests, 1)}


def run_load(port: int, path: str, seconds: float, rate: float, body_file: str,
             signatures: tuple[str, str], client: str, event: str, headers: str) -> dict:
    cmd = [sys.executable, __file__, "--load", "--port", str(port), "--path", path, "--seconds",
           str(seconds), "--rate", str(rate), "--body-file", body_file, "--signature", signatures[1],
           "--signature-sha1", signatures[0], "--headers", headers,
           "--client", client, "--event", event]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


# --- the servers -----------------------------------------------------------------------------


def bare_app():
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def bare(request: Request) -> JSONResponse:
        await request.body()
        return JSONResponse({"delivery_id": request.headers.get("x-github-delivery"), "outcome": "queued"},
                            status_code=202)

    return Starlette(routes=[Route("/bare", bare, methods=["POST"])])


async def main(args) -> None:
    import uvicorn
    from githubkit.webhooks import sign

    from bot.logs import configure_logging
    from bot.surfaces.serve import _Server
    from storage import deliveries
    from tests.openapi import webhook_examples
    from tests.serving import WEBHOOK_SECRET, make_config, serving

    # Log lines go nowhere (their cost stays): the server's own default level is info, where
    # each delivery writes one line; warning (the default here) writes none.
    configure_logging(args.log_level, "json", stream=open(os.devnull, "w"))
    payload = (webhook_examples("pull_request", action="synchronize") if args.event == "pull_request"
               else webhook_examples(args.event))[0]
    body = json.dumps(payload).encode()
    signatures = (sign(WEBHOOK_SECRET, body, "sha1"), sign(WEBHOOK_SECRET, body, "sha256"))
    loop = asyncio.get_running_loop()

    async def phase(port: int, path: str, seconds: float, rate: float) -> dict:
        # The load process blocks in a thread; this loop keeps serving meanwhile.
        if path.lstrip("/") not in args.phases and "all" not in args.phases:
            return {"n": 0, "elapsed": 1.0, "statuses": {}, "latencies": [float("nan")], "warmup": 0,
                    "cpu_ms": 0.0}
        cpu = time.process_time()
        got = await loop.run_in_executor(None, run_load, port, path, seconds, rate, body_file,
                                         signatures, args.client, args.event, args.headers)
        # This process's CPU (every thread) per request answered: what the endpoint costs.
        got["cpu_ms"] = (time.process_time() - cpu) * 1000 / max(got["n"] + got["warmup"], 1)
        return got

    with tempfile.TemporaryDirectory() as tmp:
        body_file = f"{tmp}/body.json"
        Path(body_file).write_bytes(body)
        bare = _Server(uvicorn.Config(bare_app(), host="127.0.0.1", port=0, log_config=None,
                                      lifespan="off", access_log=False))
        bare_task = asyncio.create_task(bare.serve())
        while not bare.started:
            await asyncio.sleep(0.02)
        server_section = {}
        if args.batch_max is not None:
            server_section["webhook_batch_max"] = args.batch_max
        if args.batch_wait is not None:
            server_section["webhook_batch_wait_seconds"] = args.batch_wait
        # The job settings of the defaults (config.example.toml), not the tests' quick polling.
        config = make_config(f"sqlite:///{tmp}/bench.db", server=server_section, jobs={
            "workers": args.workers, "idle_poll_seconds": 1.0, "backoff_base_seconds": 2.0,
            "backoff_cap_seconds": 600.0})
        try:
            async with serving(config) as (rt, http):
                port = int(str(http.base_url).rsplit(":", 1)[1].strip("/"))
                # Saturation in alternating slices (bare, /webhook, bare, ...): the machine's
                # speed drifts over seconds, and each endpoint then meets the same drift.
                slices = []
                for _ in range(args.slices):
                    slices.append((await phase(bare.port, "/bare", args.seconds / args.slices, 0),
                                   await phase(port, "/webhook", args.seconds / args.slices, 0)))
                bare_sat, hook_sat = (merged([pair[i] for pair in slices]) for i in (0, 1))
                bare_rate = await phase(bare.port, "/bare", args.rate_seconds, args.rate)
                hook_rate = await phase(port, "/webhook", args.rate_seconds, args.rate)
                recorded = await deliveries.count(rt.db)
                intake = rt.webhook_intake
                checkpoints = getattr(getattr(rt.db, "checkpointer", None), "checkpoints", None)
        finally:
            bare.should_exit = True
            await bare_task

    sent = sum(r["n"] + r["warmup"] for r in (hook_sat, hook_rate))
    ok = sum(r["statuses"].get("202", 0) for r in (hook_sat, hook_rate))
    cfg = config.server
    batching = (f"batch wait {cfg.webhook_batch_wait_seconds * 1000:g} ms, max {cfg.webhook_batch_max}"
                if hasattr(cfg, "webhook_batch_max") else "no batching")
    print(f"SQLite, {CONNECTIONS} connections, {args.workers} job workers, {args.event} payload {len(body)} bytes, "
          f"client {args.client}, {args.headers} headers; {batching}; log level {args.log_level}")
    bare_tput = bare_sat["n"] / bare_sat["elapsed"]
    hook_tput = hook_sat["n"] / hook_sat["elapsed"]
    lat = hook_sat["latencies"]
    print(f"saturation ({args.seconds:g} s each):")
    print(f"  bare      {bare_tput:8.0f} req/s   p50 {pct(bare_sat['latencies'], 50):6.2f} ms  "
          f"p99 {pct(bare_sat['latencies'], 99):6.2f} ms  server CPU {bare_sat['cpu_ms']:.3f} ms/req")
    print(f"  /webhook  {hook_tput:8.0f} req/s   p50 {pct(lat, 50):6.2f} ms  p99 {pct(lat, 99):6.2f} ms  "
          f"server CPU {hook_sat['cpu_ms']:.3f} ms/req")
    ratio = hook_tput / bare_tput if bare_tput else float("nan")
    print(f"  ratio webhook/bare: {ratio:.2f}  (target >= {TARGET_RATIO}: "
          f"{'met' if ratio >= TARGET_RATIO else 'NOT met'})")
    if len(slices) > 1:
        each = [(h["n"] / h["elapsed"]) / (b["n"] / b["elapsed"]) for b, h in slices]
        print(f"  ratio of each slice ({args.seconds / args.slices:g} s each): "
              + ", ".join(f"{r:.2f}" for r in each))
    print(f"fixed rate {args.rate:g}/s ({args.rate_seconds:g} s, latency from the scheduled send):")
    for name, r in (("bare", bare_rate), ("/webhook", hook_rate)):
        got = r["n"] / r["elapsed"]
        print(f"  {name:9} {got:6.0f} req/s   p50 {pct(r['latencies'], 50):6.2f} ms  "
              f"p99 {pct(r['latencies'], 99):6.2f} ms  max {max(r['latencies']):7.2f} ms")
    p99 = pct(hook_rate["latencies"], 99)
    print(f"  /webhook p99 target < {TARGET_P99_MS:g} ms: {'met' if p99 < TARGET_P99_MS else 'NOT met'}")
    statuses: dict[str, int] = {}
    for r in (hook_sat, hook_rate):
        for code, k in r["statuses"].items():
            statuses[code] = statuses.get(code, 0) + k
    print(f"deliveries: {sent} sent, {ok} answered 202 (not counting the warm-up), {recorded} recorded; "
          f"statuses {statuses}")
    if intake is not None:
        print(f"intake: {intake.batches} transactions, largest batch {intake.largest_batch}, "
              f"{recorded / max(intake.batches, 1):.1f} deliveries per transaction"
              + (f"; {checkpoints} WAL checkpoints off the loop" if checkpoints is not None else ""))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5.0, help="saturation phase length, each endpoint")
    parser.add_argument("--slices", type=int, default=5,
                        help="saturation runs in this many alternating slices of each endpoint")
    parser.add_argument("--rate", type=float, default=200.0, help="deliveries/s in the fixed-rate phase")
    parser.add_argument("--rate-seconds", type=float, default=10.0)
    parser.add_argument("--client", choices=["raw", "httpx"], default="raw")
    parser.add_argument("--event", default="pull_request",
                        help="the example payload sent (pull_request synchronize wakes a sync job; ping none)")
    parser.add_argument("--headers", choices=["github", "short"], default="github",
                        help="each delivery's headers: GitHub's whole set to both endpoints, or "
                             "(short) only what each endpoint reads, as before 4 December")
    parser.add_argument("--workers", type=int, default=4, help="job workers (they run the queued jobs)")
    parser.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"],
                        help="the server's log level (lines are written to /dev/null)")
    parser.add_argument("--phases", nargs="+", default=["all"], choices=["all", "bare", "webhook"],
                        help="run only these endpoints' phases (to profile one)")
    parser.add_argument("--batch-max", type=int, default=None, help="server.webhook_batch_max")
    parser.add_argument("--batch-wait", type=float, default=None, help="server.webhook_batch_wait_seconds")
    # The load process.
    parser.add_argument("--load", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    parser.add_argument("--body-file", help=argparse.SUPPRESS)
    parser.add_argument("--signature", help=argparse.SUPPRESS)
    parser.add_argument("--signature-sha1", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.load:
        print(json.dumps(asyncio.run(load(args))))
    else:
        asyncio.run(main(args))
