"""Primary rate limits per token and resource, reported in GitHub's x-ratelimit-* headers."""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass
class Bucket:
    limit: int
    reset: int  # epoch seconds
    used: int = 0

    @property
    def remaining(self) -> int:
        return max(0, self.limit - self.used)

    def to_dict(self) -> dict:
        return {"limit": self.limit, "remaining": self.remaining, "reset": self.reset,
                "used": self.used}


class RateLimiter:
    def __init__(self, limit: int = 5000, window: int = 3600) -> None:
        self.limit = limit
        self.window = window
        self._buckets: dict[tuple[str, str], Bucket] = {}

    def bucket(self, resource: str, key: str) -> Bucket:
        found = self._buckets.get((resource, key))
        clock = int(time.time())
        if found is None or found.reset <= clock:
            found = self._buckets[(resource, key)] = Bucket(self.limit, clock + self.window)
        return found

    def consume(self, resource: str, key: str) -> Bucket:
        found = self.bucket(resource, key)
        found.used += 1
        return found

    @staticmethod
    def headers(bucket: Bucket, resource: str) -> dict[str, str]:
        return {"x-ratelimit-limit": str(bucket.limit),
                "x-ratelimit-remaining": str(bucket.remaining),
                "x-ratelimit-reset": str(bucket.reset),
                "x-ratelimit-used": str(bucket.used),
                "x-ratelimit-resource": resource}

    def reset(self) -> None:
        self._buckets.clear()
