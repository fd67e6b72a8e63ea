"""Seeded request chaos: random 5xx, rate limits, slow answers and lost acknowledgements by rate.

Every request the chaos sees draws the same four numbers from one `random.Random(seed)`, whatever
the rates and outcomes, so a run is reproducible given the same seed and request order.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from graphql import GraphQLError, OperationType, get_operation_ast, parse

from .errors import Unprocessable

ERROR_STATUSES = (500, 502, 503)
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# Never faulted: the control API (and the git hook endpoint under it), and GitHub's free
# rate-limit probe, which a client uses to find out whether it may go on.
ALWAYS_EXCLUDED = (re.compile(r"^/_sim/"), re.compile(r"^/rate_limit$"))

SECONDARY_MESSAGE = ("You have exceeded a secondary rate limit. Please wait a few minutes before "
                     "you try again.")
SECONDARY_DOCS = ("https://docs.github.com/rest/using-the-rest-api/rate-limits-for-the-rest-api"
                  "#about-secondary-rate-limits")
TOO_MANY_MESSAGE = "Too many requests. Retry after the time given in the Retry-After header."
ERROR_MESSAGES = {500: "Server Error", 502: "Bad Gateway", 503: "Service Unavailable"}


def check_rate(name: str, value: float) -> float:
    value = float(value)
    if not 0.0 <= value <= 1.0:
        raise Unprocessable(f"{name} must be between 0 and 1, got {value}", name)
    return value


@dataclass
class ChaosSettings:
    """What `Simulator.chaos` takes; rates are probabilities per request (0..1)."""

    seed: int
    error_rate: float = 0.0  # 500, 502 or 503, picked at random
    rate_limit_rate: float = 0.0  # 429 with Retry-After
    secondary_rate: float = 0.0  # 403 "secondary rate limit" with Retry-After
    retry_after: int = 1  # seconds, in Retry-After
    slow_rate: float = 0.0
    slow_seconds: float = 0.5
    lost_ack_rate: float = 0.0  # writes only: done, then answered 502
    exclude: tuple[str, ...] = ()  # regexes searched in the path; matching paths never faulted
    _excluded: list[re.Pattern] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.seed = int(self.seed)
        for name in ("error_rate", "rate_limit_rate", "secondary_rate", "slow_rate",
                     "lost_ack_rate"):
            setattr(self, name, check_rate(name, getattr(self, name)))
        if self.error_rate + self.rate_limit_rate + self.secondary_rate > 1.0 + 1e-9:
            raise Unprocessable("error_rate + rate_limit_rate + secondary_rate must be at most 1",
                                "error_rate")
        self.retry_after = int(self.retry_after)
        self.slow_seconds = float(self.slow_seconds)
        if self.retry_after < 0 or self.slow_seconds < 0:
            raise Unprocessable("retry_after and slow_seconds must not be negative",
                                "retry_after")
        if isinstance(self.exclude, str):
            self.exclude = (self.exclude,)
        self.exclude = tuple(self.exclude)
        try:
            self._excluded = [re.compile(p) for p in self.exclude]
        except re.error as e:
            raise Unprocessable(f"exclude is not a list of regular expressions: {e}",
                                "exclude") from None

    def excluded(self, path: str) -> bool:
        return any(p.search(path) for p in (*ALWAYS_EXCLUDED, *self._excluded))

    def to_dict(self) -> dict:
        data = {k: v for k, v in self.__dict__.items() if not k.startswith("_")}
        data["exclude"] = list(self.exclude)
        return data


@dataclass
class ChaosDecision:
    """What happens to one request: a pause first, then a fault answer or the real one."""

    slow: float = 0.0
    kind: str | None = None  # error | rate_limit | secondary
    status: int | None = None
    retry_after: int = 1
    may_lose_ack: bool = False  # applies only if the request turns out to be a write


S = TypeVar("S")  # a run's settings


class SeededRun(Generic[S]):
    """Chaos settings in force (None: off), the Random they draw from and what they did."""

    def __init__(self) -> None:
        self.settings: S | None = None
        self.counts: Counter[str] = Counter()
        self.seen = 0  # requests (or deliveries) the chaos drew for
        self._random = random.Random(0)

    def start(self, settings) -> None:
        """A fresh run: a new Random(seed) and zeroed counts."""
        self.settings = settings
        self._random = random.Random(settings.seed)
        self.counts.clear()
        self.seen = 0

    def stop(self) -> None:
        """No more chaos; the counts stay readable."""
        self.settings = None


class RequestChaos(SeededRun[ChaosSettings]):
    settings: ChaosSettings | None

    def decide(self, path: str) -> ChaosDecision | None:
        s = self.settings
        if s is None or s.excluded(path):
            return None
        self.seen += 1
        draw = self._random.random
        slow, fail, pick, lose = draw(), draw(), draw(), draw()
        decision = ChaosDecision(retry_after=s.retry_after, may_lose_ack=lose < s.lost_ack_rate)
        if slow < s.slow_rate:
            decision.slow = s.slow_seconds
            self.counts["slow"] += 1
        if fail < s.error_rate:
            decision.kind, decision.status = "error", ERROR_STATUSES[int(pick * 3) % 3]
        elif fail < s.error_rate + s.rate_limit_rate:
            decision.kind, decision.status = "rate_limit", 429
        elif fail < s.error_rate + s.rate_limit_rate + s.secondary_rate:
            decision.kind, decision.status = "secondary", 403
        if decision.kind:
            self.counts[decision.kind] += 1
            decision.may_lose_ack = False  # a request answered with a fault was never handled
        return decision

    def to_dict(self) -> dict:
        return {"enabled": self.settings is not None,
                "settings": self.settings.to_dict() if self.settings else None,
                "counts": dict(self.counts), "requests": self.seen}


def fault_answer(decision: ChaosDecision,
                 rate_headers: dict[str, str]) -> tuple[int, dict, dict[str, str]]:
    """(status, body, headers) of a chaos fault.

    Rate-limit answers carry Retry-After and the token's real x-ratelimit-* balance: githubkit
    0.16 treats any 403/429 with Retry-After as SecondaryRateLimitExceeded, and a remaining of 0
    would tell a client the whole token is exhausted, which a random throttle is not.
    """
    assert decision.status is not None
    if decision.kind == "error":
        return decision.status, {"message": ERROR_MESSAGES[decision.status]}, {}
    message = SECONDARY_MESSAGE if decision.kind == "secondary" else TOO_MANY_MESSAGE
    headers = {**rate_headers, "Retry-After": str(decision.retry_after)}
    return decision.status, {"message": message, "documentation_url": SECONDARY_DOCS}, headers


def is_mutation(body: bytes) -> bool:
    """Whether a GraphQL request body runs a mutation (what a lost acknowledgement may hit)."""
    try:
        data = json.loads(body or b"{}")
        operation = get_operation_ast(parse(data["query"]), data.get("operationName"))
    except (ValueError, KeyError, TypeError, GraphQLError):
        return False
    return operation is not None and operation.operation == OperationType.MUTATION
