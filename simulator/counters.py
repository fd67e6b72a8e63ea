"""Request counters by (method, route template, status): what a test or benchmark asserts on."""

from __future__ import annotations

from collections import Counter, deque

# Dropped (hung) requests never got a status; they are counted under this one.
DROPPED = 0


class Counters:
    def __init__(self, keep: int = 10_000) -> None:
        self._counts: Counter[tuple[str, str, int]] = Counter()
        # The most recent requests in order, (method, path, status): what a benchmark prints to
        # show where a run's requests went.
        self.recent: deque[tuple[str, str, int]] = deque(maxlen=keep)

    def add(self, method: str, route: str, status: int, path: str | None = None) -> None:
        self._counts[(method, route, status)] += 1
        self.recent.append((method, path or route, status))

    def get(self, method: str | None = None, route: str | None = None,
            status: int | None = None) -> int:
        """Sum of the counts matching every given part (e.g. all 304s of one route)."""
        return sum(n for (m, r, s), n in self._counts.items()
                   if (method is None or m == method) and (route is None or r == route)
                   and (status is None or s == status))

    def total(self) -> int:
        return sum(self._counts.values())

    def reset(self) -> None:
        self._counts.clear()
        self.recent.clear()

    def snapshot(self) -> dict:
        """`{"total": N, "routes": {"GET /repos/...": {"200": n, "304": m}}}`."""
        routes: dict[str, dict[str, int]] = {}
        for (method, route, status), n in sorted(self._counts.items()):
            routes.setdefault(f"{method} {route}", {})[str(status)] = n
        return {"total": self.total(), "routes": routes}
