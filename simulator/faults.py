"""Injected request faults: errors, rate limiting, slowness and hangs for matching requests."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field

from .errors import Unprocessable

FAULT_STATUSES = (401, 403, 404, 405, 429, 500, 502, 503)


@dataclass
class Fault:
    """Applies to requests whose method and path match, `count` times (None: until cleared).

    Exactly one effect: `status` (an error answer; 403/429 come with Retry-After and an
    exhausted rate limit), `drop` (hold the request open until the client gives up), or only
    `delay` (answer normally after `delay` seconds). `delay` also postpones a `status`.
    """

    id: int
    path: str  # a regular expression searched in the request path
    method: str = "*"
    status: int | None = None
    retry_after: int = 60
    delay: float = 0.0
    drop: bool = False
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
        if self.status is None and not self.drop and self.delay <= 0:
            raise Unprocessable("a fault needs a status, drop, or a positive delay", "status")

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
