"""Which replica runs the once-per-deployment duties: the poller, the repository scan, the
webhook redelivery. See docs/architecture.md, "Replicas"."""

from __future__ import annotations

from storage.database import Database


class Leadership:
    """`await holds()` before each periodic duty; False means another replica runs it."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def holds(self) -> bool:
        return True
