"""The one place that knows how the simulator injects seeded faults and reports what it saw.

The simulator has a seeded, rate-based chaos API (`sim.chaos(seed, ...)`, `sim.chaos_off()`,
`sim.webhook_chaos(seed, ...)`, `sim.duplicate_effects()`, `sim.forced_pushes()`). Where a piece
of it exists this module uses it; where it does not (an older simulator), it builds the same
behaviour in this process from the count-based faults, without changing the simulator's files:

- request faults: a seeded decision per request, handed to the gateway as a `Fault` (so the
  simulator answers and counts it like any injected fault);
- lost acks: an ASGI wrapper that lets a write happen and then answers 502 instead;
- webhook faults: a seeded decision per event, set through the count-based `WebhookFaults`
  (`drop_next`, `duplicate_next`, `reorder_next`, `delay`) just before the event is emitted.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import asdict, dataclass
from datetime import datetime

from simulator import Fault, Simulator, build_app

WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


@dataclass(frozen=True)
class ApiRates:
    error_rate: float = 0.08  # 500/502/503
    rate_limit_rate: float = 0.02  # 429 with Retry-After
    secondary_rate: float = 0.01  # 403 secondary rate limit with Retry-After
    retry_after: int = 1
    slow_rate: float = 0.03  # answered normally after slow_seconds
    slow_seconds: float = 1.5
    lost_ack_rate: float = 0.03  # a write happens, the client gets a 502


@dataclass(frozen=True)
class WebhookRates:
    drop_rate: float = 0.10
    duplicate_rate: float = 0.05
    reorder_rate: float = 0.05
    # Deliveries wait up to this long; the simulator sends them one at a time, as GitHub does
    # per hook, so a delay holds the later ones too: keep the mean well under the event rate.
    delay_max: float = 0.2


class Chaos:
    """Serve the simulator through `app` (`SimulatorServer(sim, app=chaos.app)`): the lost-ack
    fallback wraps the simulator's own."""

    def __init__(self, sim: Simulator, *, native: bool = True) -> None:
        """`native=False` uses the fallbacks even where the simulator has the real thing."""
        self.sim = sim
        self.native_api = native and hasattr(sim, "chaos") and hasattr(sim, "chaos_off")
        self.native_hooks = (native and hasattr(sim, "webhook_chaos")
                             and hasattr(sim, "webhook_chaos_off"))
        self.stats: Counter[str] = Counter()  # what the fallbacks injected
        self._api: ApiRates | None = None
        self._hooks: WebhookRates | None = None
        self._rng = random.Random(0)
        self._ack_rng = random.Random(0)
        self._hook_rng = random.Random(0)
        if not self.native_api:
            self._take = sim.faults.take
            sim.faults.take = self._fallback_take  # type: ignore[method-assign]
        self.app = build_app(sim) if self.native_api else _LostAcks(build_app(sim), self)
        if not self.native_hooks:
            self._emit = sim.webhooks.emit
            sim.webhooks.emit = self._fallback_emit  # type: ignore[method-assign]

    @property
    def mode(self) -> str:
        return (f"api={'simulator' if self.native_api else 'harness'},"
                f"webhooks={'simulator' if self.native_hooks else 'harness'}")

    def api_on(self, seed: int, rates: ApiRates) -> None:
        if self.native_api:
            self.sim.chaos(seed, **asdict(rates))
            return
        self._api = rates
        self._rng = random.Random(f"{seed}:api")
        self._ack_rng = random.Random(f"{seed}:acks")

    def webhooks_on(self, seed: int, rates: WebhookRates) -> None:
        if self.native_hooks:
            self.sim.webhook_chaos(seed, **asdict(rates))
            return
        self._hooks = rates
        self._hook_rng = random.Random(f"{seed}:webhooks")

    def off(self) -> None:
        if self.native_api:
            self.sim.chaos_off()
        if self.native_hooks:
            self.sim.webhook_chaos_off()
        self._api = self._hooks = None
        self.sim.webhook_faults(drop_next=0, duplicate_next=0, reorder_next=0, delay=0.0)

    # -- what happened ---------------------------------------------------------------------

    def injected(self) -> dict[str, int]:
        """Faults by kind: request faults from the simulator's counters, webhook faults from its
        delivery records, lost acks and slow answers from whoever injected them."""
        by_status: Counter[str] = Counter()
        for statuses in self.sim.counters.snapshot()["routes"].values():
            for status, n in statuses.items():
                by_status[status] += n
        api = getattr(self.sim, "chaos_counts", None) if self.native_api else None
        hooks = getattr(self.sim, "webhook_chaos_counts", None) if self.native_hooks else None
        api, hooks = dict(api or {}), dict(hooks or {})
        deliveries = self.sim.deliveries
        return {
            "5xx": sum(n for s, n in by_status.items() if s.startswith("5")),
            "429": by_status["429"], "403": by_status["403"],
            "slow": api.get("slow", self.stats["slow"]),
            "lost_ack": api.get("lost_ack", self.stats["lost_ack"]),
            "hook_dropped": hooks.get("dropped", sum(d.dropped for d in deliveries)),
            "hook_duplicated": hooks.get("duplicated", sum(d.duplicate for d in deliveries)),
            "hook_reordered": hooks.get("reordered", sum(d.reordered for d in deliveries)),
            "hook_delayed": hooks.get("delayed", self.stats["hook_delayed"]),
        }

    def webhook_lag_max(self) -> float:
        """The longest a delivery waited between its event and its first attempt (seconds)."""
        lags = [(datetime.fromisoformat(d.attempts[0].at) - datetime.fromisoformat(d.queued_at))
                .total_seconds() for d in self.sim.deliveries if d.attempts]
        return max(lags, default=0.0)

    def duplicates(self) -> list[dict]:
        if self.native_api and hasattr(self.sim, "duplicate_effects"):
            return list(self.sim.duplicate_effects())
        return duplicate_effects(self.sim.side_effects)

    def forced_pushes(self) -> list[dict]:
        if self.native_api and hasattr(self.sim, "forced_pushes"):
            return list(self.sim.forced_pushes())
        # An older simulator: the `push` webhook says `forced`, and every push is recorded as a
        # delivery (a dropped one too).
        return [{"ref": d.payload.get("ref"), "before": d.payload.get("before"),
                 "after": d.payload.get("after"), "delivery": d.id}
                for d in self.sim.webhooks.find("push") if d.payload.get("forced")]

    # -- fallbacks -------------------------------------------------------------------------

    def _fallback_take(self, method: str, path: str) -> Fault | None:
        fault = self._take(method, path)  # faults a test injected on purpose come first
        rates = self._api
        if fault is not None or rates is None:
            return fault
        r = self._rng.random()
        edges = (rates.error_rate, rates.rate_limit_rate, rates.secondary_rate, rates.slow_rate)
        if r < edges[0]:
            return Fault(id=0, path=".", status=self._rng.choice((500, 502, 503)))
        r -= edges[0]
        if r < edges[1]:
            return Fault(id=0, path=".", status=429, retry_after=rates.retry_after)
        r -= edges[1]
        if r < edges[2]:
            return Fault(id=0, path=".", status=403, retry_after=rates.retry_after)
        r -= edges[2]
        if r < edges[3]:
            self.stats["slow"] += 1
            return Fault(id=0, path=".", delay=rates.slow_seconds)
        return None

    def lose_ack(self, method: str, path: str) -> bool:
        rates = self._api
        if rates is None or method not in WRITES or path.startswith("/_sim/"):
            return False
        if self._ack_rng.random() >= rates.lost_ack_rate:
            return False
        self.stats["lost_ack"] += 1
        return True

    def _fallback_emit(self, event: str, payload: dict):
        rates, faults = self._hooks, self.sim.webhooks.faults
        if rates is not None:
            rng = self._hook_rng
            r = rng.random()
            if r < rates.drop_rate:
                faults.drop_next += 1
            elif r < rates.drop_rate + rates.duplicate_rate:
                faults.duplicate_next += 1
            elif r < rates.drop_rate + rates.duplicate_rate + rates.reorder_rate:
                faults.reorder_next = max(faults.reorder_next, 2)  # this one and the next, swapped
            # The dispatcher applies `delay` to the next delivery it sends: about one in five waits.
            faults.delay = rng.uniform(0, rates.delay_max) if rng.random() < 0.2 else 0.0
            self.stats["hook_delayed"] += faults.delay > 0
        return self._emit(event, payload)


class _LostAcks:
    """ASGI wrapper: the request runs to completion (the write happens), the answer is a 502."""

    def __init__(self, app, chaos: Chaos) -> None:
        self.app = app
        self.chaos = chaos

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or not self.chaos.lose_ack(scope["method"], scope["path"]):
            await self.app(scope, receive, send)
            return

        async def swallow(message) -> None:
            return None

        await self.app(scope, receive, swallow)
        body = json.dumps({"message": "Bad Gateway"}).encode()
        await send({"type": "http.response.start", "status": 502,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


def duplicate_effects(effects: list[dict]) -> list[dict]:
    """Writes that happened twice: the same comment body on a PR, a second reply in one thread,
    a second check run of one name on one head, a second merge of one PR."""
    keys = {
        "issue_comment": ("repo", "number", "body"),
        "review_reply": ("repo", "number", "in_reply_to"),
        "check_run_created": ("repo", "head_sha", "name"),
        "merge": ("repo", "number"),
    }
    seen: Counter[tuple] = Counter()
    dupes = []
    for e in effects:
        fields = keys.get(e["kind"])
        if fields is None:
            continue
        key = (e["kind"], e.get("actor"), *(e.get(f) for f in fields))
        seen[key] += 1
        if seen[key] == 2:
            dupes.append({k: e.get(k) for k in ("kind", "actor", *fields)})
    return dupes
