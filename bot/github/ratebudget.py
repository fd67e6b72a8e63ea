"""The GitHub rate-limit budget of one client (one token, or one App installation), and of an App
serving several installations (`InstallationBudgets`: one budget each, paced by the tightest).

Every GitHub answer carries the balance of the bucket it was charged to (`x-ratelimit-limit`,
`-remaining`, `-used`, `-reset`, `-resource`: core, graphql, search, ...). The client hands each
answer's headers to `observe_headers`, so knowing the budget costs no request.

Pacing (what the poller asks):

- A **reserve** (`reserve_fraction` of the limit, `[github] reserve_fraction`) is kept for PRs
  with news (a webhook, a decision pending) until the reset: idle re-reads never spend it.
- The rest is **spread evenly** over the time left in the window: in one slice (a poll
  interval) idle re-reads may spend `spendable * slice / time_left` requests. The allowance is
  recomputed from the last observed balance every time, so what idle polls did not spend (a 304
  spends nothing) stays available, and what news spent is no longer offered to idle polls.

Answers to concurrent requests arrive in any order: within one window the balance only goes
down, so an answer reporting more remaining than already seen is older and is ignored; one from
an earlier window too.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

NEWS = "news"  # a PR with a webhook or a decision pending: may spend the reserve
IDLE = "idle"  # a poll's re-read of a PR with no news: never spends the reserve
Kind = Literal["news", "idle"]

DEFAULT_RESERVE_FRACTION = 0.2
DEFAULT_SLICE_SECONDS = 60.0
WINDOW_SECONDS = 3600.0  # GitHub's primary limits are per hour
ASSUMED_LIMIT = 5000  # an App installation's (and a token's) hourly limit, until an answer says
# Resets within this of each other are the same window (a new window moves the reset by ~an hour).
SAME_WINDOW_SECONDS = 60.0
UNMETERED = 1_000_000_000  # the idle allowance where GitHub meters nothing (GHES without limits)

Now = datetime | float | int | None


@dataclass(frozen=True)
class Bucket:
    """One resource's balance as GitHub last reported it (times in epoch seconds)."""

    resource: str
    limit: int
    remaining: int
    used: int
    reset: float
    observed_at: float
    assumed: bool = False  # not reported: a full window assumed (before any answer, or past the reset)

    def seconds_left(self, now: float) -> float:
        return max(0.0, self.reset - now)


class RateBudget:
    def __init__(self, *, reserve_fraction: float = DEFAULT_RESERVE_FRACTION,
                 slice_seconds: float = DEFAULT_SLICE_SECONDS,
                 clock: Callable[[], float] = time.time) -> None:
        self.reserve_fraction = reserve_fraction
        self.slice_seconds = slice_seconds
        self.clock = clock
        self.unmetered = False  # answers came without rate-limit headers, and none with them
        self._buckets: dict[str, Bucket] = {}
        self.configure(reserve_fraction=reserve_fraction, slice_seconds=slice_seconds)

    def configure(self, *, reserve_fraction: float | None = None, slice_seconds: float | None = None) -> None:
        if reserve_fraction is not None:
            if not 0 <= reserve_fraction < 1:
                raise ValueError(f"reserve_fraction must be in [0, 1): {reserve_fraction}")
            self.reserve_fraction = reserve_fraction
        if slice_seconds is not None:
            if slice_seconds <= 0:
                raise ValueError(f"slice_seconds must be positive: {slice_seconds}")
            self.slice_seconds = slice_seconds

    def _now(self, now: Now) -> float:
        if now is None:
            return self.clock()
        if isinstance(now, datetime):
            return now.timestamp()
        return float(now)

    # -- observing ------------------------------------------------------------------------------

    def observe(self, resource: str, limit: int, remaining: int, reset: float,
                used: int | None = None, *, now: Now = None) -> bool:
        """Record one answer's balance; False if it was older than what is known (ignored)."""
        at = self._now(now)
        limit, remaining = max(0, int(limit)), max(0, int(remaining))
        used = max(0, limit - remaining) if used is None else max(0, int(used))
        known = self._buckets.get(resource)
        if known is not None:
            if reset <= known.reset - SAME_WINDOW_SECONDS:
                return False  # an answer from the previous window
            if reset < known.reset + SAME_WINDOW_SECONDS and remaining > known.remaining:
                return False  # same window, older answer
        self._buckets[resource] = Bucket(resource, limit, remaining, used, float(reset), at)
        self.unmetered = False
        return True

    def observe_headers(self, headers: Mapping[str, str], *, status: int | None = None,
                        now: Now = None) -> bool:
        """Record the balance an answer's `x-ratelimit-*` headers report.

        A secondary rate-limit answer (it carries Retry-After) is skipped: its headers need not
        describe the primary budget. A successful answer with no headers at all means GitHub
        meters nothing here (GHES with rate limiting off), until an answer says otherwise.
        """
        if headers.get("retry-after") is not None:
            return False
        limit, remaining, reset = (headers.get(f"x-ratelimit-{name}") for name in ("limit", "remaining", "reset"))
        if limit is None or remaining is None or reset is None:
            if status is not None and status < 400 and not self._buckets:
                self.unmetered = True
            return False
        try:
            used = headers.get("x-ratelimit-used")
            return self.observe(headers.get("x-ratelimit-resource") or "core", int(limit), int(remaining),
                                float(reset), int(used) if used is not None else None, now=now)
        except ValueError:
            return False

    # -- reading --------------------------------------------------------------------------------

    def bucket(self, resource: str = "core", now: Now = None) -> Bucket | None:
        """The balance now: None if never reported; past its reset, a full window (assumed)."""
        known = self._buckets.get(resource)
        if known is None:
            return None
        at = self._now(now)
        if at >= known.reset:
            return Bucket(resource, known.limit, known.limit, 0, at + WINDOW_SECONDS, known.observed_at, assumed=True)
        return known

    def _effective(self, resource: str, at: float) -> Bucket:
        """What pacing works with: the bucket, or before any answer a full default window."""
        return self.bucket(resource, at) or Bucket(resource, ASSUMED_LIMIT, ASSUMED_LIMIT, 0,
                                                   at + WINDOW_SECONDS, at, assumed=True)

    def reserve(self, resource: str = "core", now: Now = None) -> int:
        """Requests kept for PRs with news until the reset."""
        return math.ceil(self._effective(resource, self._now(now)).limit * self.reserve_fraction)

    def snapshot(self, now: Now = None) -> dict[str, dict]:
        """Every resource seen: limit, remaining, used, reset (epoch), reset_in_seconds, reserve."""
        at = self._now(now)
        out: dict[str, dict] = {}
        for resource in sorted(self._resources()):
            b = self.bucket(resource, at)
            assert b is not None
            out[resource] = {
                "limit": b.limit, "remaining": b.remaining, "used": b.used, "reset": int(b.reset),
                "reset_in_seconds": round(b.seconds_left(at), 3), "reserve": math.ceil(b.limit * self.reserve_fraction),
                "assumed": b.assumed, "observed_at": b.observed_at,
            }
        return out

    # -- pacing ---------------------------------------------------------------------------------

    def idle_allowance(self, now: Now = None, *, resource: str = "core", cost: float = 1.0,
                       slice_seconds: float | None = None) -> int:
        """How many idle re-reads may be spent now (in this slice, e.g. one poll interval).

        `cost`: the requests one re-read may spend (the caller's worst case; a 304 spends none,
        so the estimate errs on the safe side). The reserve is never offered; what is above it
        is spread evenly over the time left until the reset.
        """
        if cost <= 0:
            raise ValueError(f"cost must be positive: {cost}")
        at = self._now(now)
        if self.unmetered:
            return UNMETERED
        b = self._effective(resource, at)
        spendable = b.remaining - math.ceil(b.limit * self.reserve_fraction)
        if spendable <= 0:
            return 0
        width = slice_seconds if slice_seconds is not None else self.slice_seconds
        left = b.seconds_left(at)
        share = spendable if left <= width else spendable * width / left
        return int(share // cost)

    def may_spend(self, kind: Kind, now: Now = None, *, resource: str = "core", cost: int = 1) -> bool:
        """May a request of this kind be made now? News may spend down to zero; idle work only
        what is above the reserve (its pace is `idle_allowance`)."""
        if kind not in (NEWS, IDLE):
            raise ValueError(f"kind must be {NEWS!r} or {IDLE!r}: {kind!r}")
        at = self._now(now)
        if self.unmetered:
            return True
        b = self.bucket(resource, at)
        if b is None:
            return True  # nothing known yet: the first answers will tell
        if kind == NEWS:
            return b.remaining >= cost
        return b.remaining - cost >= math.ceil(b.limit * self.reserve_fraction)

    def exhausted_for(self, kind: Kind, now: Now = None, *, resource: str = "core") -> float:
        """Seconds until a request of this kind may be made again (0 if it may now)."""
        at = self._now(now)
        if self.may_spend(kind, at, resource=resource):
            return 0.0
        b = self.bucket(resource, at)
        return b.seconds_left(at) if b is not None else 0.0

    def _resources(self) -> set[str]:
        return set(self._buckets)

    def clear(self) -> None:
        self._buckets.clear()
        self.unmetered = False


class InstallationBudgets(RateBudget):
    """An App on several installations: each installation has its own 5,000 an hour, so the
    client records each answer in the budget of the installation it came from (`of`), and
    refuses a request only when that installation's balance is spent.

    Pacing reads this object as one budget, and it answers for the tightest installation (the
    least remaining of a resource): the poller and the scan then spend at most what the
    installation closest to its limit could afford, across all installations. That holds back
    idle re-reads on the others when one runs low; it never spends past any one's reserve, since
    each re-read goes to a single installation.
    """

    def __init__(self, **kw) -> None:
        self._parts: dict[int, RateBudget] = {}
        super().__init__(**kw)

    def of(self, installation_id: int) -> RateBudget:
        part = self._parts.get(installation_id)
        if part is None:
            part = self._parts[installation_id] = RateBudget(
                reserve_fraction=self.reserve_fraction, slice_seconds=self.slice_seconds, clock=self.clock)
        return part

    @property  # type: ignore[override]
    def unmetered(self) -> bool:
        """GitHub meters none of the installations (GHES with rate limiting off)."""
        parts = getattr(self, "_parts", {})
        return self._unmetered or (bool(parts) and all(p.unmetered for p in parts.values()))

    @unmetered.setter
    def unmetered(self, value: bool) -> None:
        self._unmetered = value

    def installations(self) -> dict[int, RateBudget]:
        return dict(self._parts)

    def configure(self, *, reserve_fraction: float | None = None, slice_seconds: float | None = None) -> None:
        super().configure(reserve_fraction=reserve_fraction, slice_seconds=slice_seconds)
        for part in getattr(self, "_parts", {}).values():
            part.configure(reserve_fraction=reserve_fraction, slice_seconds=slice_seconds)

    def bucket(self, resource: str = "core", now: Now = None) -> Bucket | None:
        """The tightest installation's balance (the App's own answers, unassigned, count too)."""
        at = self._now(now)
        found = [b for part in self._parts.values() if (b := part.bucket(resource, at)) is not None]
        if (own := super().bucket(resource, at)) is not None:
            found.append(own)
        return min(found, key=lambda b: (b.remaining, b.reset), default=None)

    def _resources(self) -> set[str]:
        return super()._resources().union(*(p._resources() for p in self._parts.values()))

    def clear(self) -> None:
        super().clear()
        for part in self._parts.values():
            part.clear()
